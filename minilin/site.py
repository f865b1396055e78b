"""`python -m minilin site`: the course as a static HTML site, built from the committed, executed notebooks.

Nothing is executed: every page shows the code, the outputs and the figures the notebooks were committed with.
The README is the landing page, followed by the table of contents in course order (00, 01, ...). Sphinx with
myst-nb reads the notebooks (`pip install -e ".[site]"`); math is typeset by a local copy of MathJax 2.7 (from
`jupyter-server-mathjax`), so the site needs no network, and no page loads a script or stylesheet from the web.
Interactive widgets (the explorer's sliders) need a running kernel: a page shows their last drawn figure or
their text form instead. Display math written inside a paragraph (`text\n$$...$$\ntext`), which JupyterLab
renders, is given blank lines around it in the build copy, since myst reads `$$` as display math only as a block.
"""
import importlib.util
import json
import re
import shutil
import tempfile
from pathlib import Path

from minilin.cli import Parser, UsageError

ROOT = Path(__file__).resolve().parent.parent  # the course folder (README.md, notebooks/)
NEEDS = {"sphinx": "sphinx", "myst_nb": "myst-nb", "furo": "furo", "jupyter_server_mathjax": "jupyter-server-mathjax"}
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full"

CONF = '''\
# Written by `python -m minilin site` (minilin/site.py); the build folder is temporary.
project = "minilin"
html_title = "minilin: efficient attention from scratch"
extensions = ["myst_nb"]
nb_execution_mode = "off"            # the committed outputs, never re-executed
nb_ipywidgets_js = {{}}              # no widget manager from a CDN: a widget shows its last image instead
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
myst_update_mathjax = False       # myst would add a MathJax 3 configuration; this MathJax is 2.7
html_theme = "furo"
html_static_path = ["_static"]
mathjax_path = "mathjax/MathJax.js?config={mathjax_config}"
# jupyter-server-mathjax ships MathJax 2.7 with the STIX-Web fonts only (as the classic notebook used it)
mathjax2_config = {{
    "tex2jax": {{"inlineMath": [["\\\\(", "\\\\)"]], "displayMath": [["\\\\[", "\\\\]"]], "processEscapes": True}},
    "HTML-CSS": {{"availableFonts": ["STIX-Web"], "preferredFont": "STIX-Web", "webFont": "STIX-Web", "imageFont": None}},
    "SVG": {{"font": "STIX-Web"}},
}}
exclude_patterns = ["_build"]
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"]
html_show_sourcelink = False
'''


def build_parser():
    parser = Parser(
        prog="python -m minilin site",
        description="Build the course as a static HTML site from the committed, executed notebooks (nothing is "
                    "re-executed). Open OUT/index.html in a browser, or serve the folder with "
                    "`python -m http.server --directory OUT`. Needs the site extra: pip install -e \".[site]\".")
    parser.add_argument("out", nargs="?", default="results/site",
                        help="folder to write the site into (default: results/site); it is replaced")
    parser.add_argument("--notebooks", default=None,
                        help="folder of the notebooks to show (default: the course's notebooks/)")
    parser.add_argument("--quiet", action="store_true", help="print only warnings and the last line")
    parser.add_argument("--teacher", action="store_true",
                        help="build from a course folder that holds solutions/ (a site for the teacher only: it "
                             "shows the teacher's sections); the public site is built from the student copy that "
                             "`python -m minilin release DIR` writes")
    return parser


def teachers_copy(notebooks=None):
    """The folder the site would read that holds solutions/ (the course folder, or the --notebooks folder's
    parent), or None."""
    for folder in (ROOT, Path(notebooks).resolve().parent if notebooks else None):
        if folder is not None and (folder / "solutions").is_dir():
            return folder
    return None


def missing_packages():
    return [pip for module, pip in NEEDS.items() if importlib.util.find_spec(module) is None]


def notebooks_in(folder):
    """The course's notebooks in course order (NN_topic.ipynb, sorted by NN)."""
    found = sorted(p for p in Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise UsageError(f"--notebooks {folder}: no NN_topic.ipynb notebooks there")
    return found


def landing_page(readme, pages):
    """The README as the first page, then a table of contents of every notebook, in course order."""
    text = readme.read_text(encoding="utf-8")
    entries = "\n".join(f"notebooks/{p.stem}" for p in pages)
    return (text.rstrip() + "\n\n## The notebooks\n\n```{toctree}\n:maxdepth: 1\n:caption: Notebooks\n\n"
            f"{entries}\n```\n")


WIDGET = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = "[interactive widget: it needs a running kernel (open the notebook in JupyterLab); its last figure:]"


def _widget_images(state, model_id, seen=()):
    """The PNG images (base64) a stored widget shows, its children's included, in display order."""
    model = state.get(model_id)
    if model is None or model_id in seen:
        return []
    if model.get("model_name") == "ImageModel":
        return [b["data"] for b in model.get("buffers", []) if b.get("path") == ["value"]][:1]
    children = model.get("state", {}).get("children", [])
    return [png for child in children for png in _widget_images(state, child.removeprefix("IPY_MODEL_"),
                                                                  (*seen, model_id))]


def static_widgets(nb):
    """Each widget output becomes what it last showed (its image, if any) and a note; the widget state goes."""
    state = nb.get("metadata", {}).pop("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    state = state.get("state", {})
    for cell in nb["cells"]:
        outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET)
            if view is None:
                outputs.append(output)
                continue
            outputs.append({"output_type": "stream", "name": "stdout", "text": WIDGET_NOTE + "\n"})
            outputs += [{"output_type": "display_data", "metadata": {}, "data": {"image/png": png, "text/plain": ""}}
                        for png in _widget_images(state, view.get("model_id", ""))]
        if "outputs" in cell:
            cell["outputs"] = outputs
    return nb


# A fenced code block, an inline code span, or a `$$...$$` formula (and the spaces and line end after it).
_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,}).*?^\1\2[ \t]*$", re.S | re.M)
_CODE_OR_DISPLAY = re.compile(r"(`+).+?\1|\$\$(?P<math>.+?)\$\$[ \t]*(?P<end>\n|\Z)?", re.S)
_LIST_MARKER = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+")


def display_math_as_blocks(markdown):
    """The markdown with every `$$...$$` formula on lines of its own between blank lines.

    JupyterLab shows `Then\n$$x$$\nso ...` as a paragraph with a displayed formula; myst's dollarmath reads `$$`
    as display math only where a block may start (it cannot interrupt a paragraph), so there the formula's dollars
    were paired with the next ones as inline math and the rest of the paragraph went wrong. Splitting the paragraph
    around the formula shows it as JupyterLab does. Code (fenced blocks, inline spans) is left alone; inside a list
    item the formula and the text after it keep the item's indentation.
    """
    parts, last = [], 0
    for fence in _FENCE.finditer(markdown):
        parts += [_display_math_outside_fences(markdown[last:fence.start()]), fence.group(0)]
        last = fence.end()
    return "".join(parts + [_display_math_outside_fences(markdown[last:])])


def _display_math_outside_fences(text):
    def block(match):
        if match.group("math") is None:
            return match.group(0)  # a code span: as written
        head = text[text.rfind("\n", 0, match.start()) + 1:match.start()]
        marker = _LIST_MARKER.match(head)
        indent = " " * (marker.end() if marker else len(head) - len(head.lstrip()))
        if not head.strip() or (marker and not head[marker.end():].strip()):
            before = "\n" + head if not marker else ""  # starts its line: a blank line above it
        else:
            before = "\n\n" + indent  # inside a line: break the line there
        formula = f"$${match.group('math')}$$"
        after = "\n\n" if match.group("end") is not None else "\n\n" + indent  # the line's end, or its rest
        return before + formula + after
    return _CODE_OR_DISPLAY.sub(block, text)


def display_math_in_notebook(nb):
    """Every markdown cell of the notebook through `display_math_as_blocks`."""
    for cell in nb["cells"]:
        if cell.get("cell_type") == "markdown":
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            cell["source"] = display_math_as_blocks(source)
    return nb


def prepare(source, notebooks):
    """Lay out a Sphinx source folder: index.md (the README), notebooks/*.ipynb, conf.py, MathJax."""
    import jupyter_server_mathjax
    pages = notebooks_in(notebooks)
    (source / "notebooks").mkdir(parents=True)
    for page in pages:
        nb = display_math_in_notebook(static_widgets(json.loads(page.read_text(encoding="utf-8"))))
        (source / "notebooks" / page.name).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    for extra in ("LICENSE",):
        if (ROOT / extra).is_file():
            shutil.copy2(ROOT / extra, source / extra)
    (source / "index.md").write_text(landing_page(ROOT / "README.md", pages), encoding="utf-8")
    (source / "conf.py").write_text(CONF.format(mathjax_config=MATHJAX_CONFIG), encoding="utf-8")
    mathjax = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(mathjax, source / "_static" / "mathjax", ignore=shutil.ignore_patterns("localization"))
    return pages


def build(out, *, notebooks=None, quiet=False):
    """Write the site into `out` (replaced). Returns the list of notebook pages built (relative paths)."""
    from sphinx.cmd.build import build_main
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="minilin-site-") as tmp:
        source = Path(tmp) / "source"
        pages = prepare(source, Path(notebooks) if notebooks else ROOT / "notebooks")
        staging = Path(tmp) / "html"
        args = ["-b", "html", *(["-q"] if quiet else []), str(source), str(staging),
                "-d", str(Path(tmp) / "doctrees")]
        if build_main(args) != 0:
            raise RuntimeError("sphinx-build failed (its messages are above)")
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, out)
    return [f"notebooks/{p.stem}.html" for p in pages]


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.teacher and (folder := teachers_copy(args.notebooks)) is not None:
        raise UsageError(f"{folder} holds solutions/ (the teacher's copy): build the public site from the student "
                         "copy (python -m minilin release DIR, then python -m minilin site in DIR), or add --teacher "
                         "for a site you keep to yourself")
    if missing := missing_packages():
        raise UsageError(f"the site needs {', '.join(missing)}: pip install -e \".[site]\"")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder: give a folder for the site")
    if out.resolve() in (ROOT.resolve(), (ROOT / "notebooks").resolve()) or out.resolve() in ROOT.resolve().parents:
        raise UsageError(f"{out}: the site folder is replaced; give a folder of its own, e.g. results/site")
    if out.is_dir() and any(out.iterdir()) and not (out / "index.html").is_file():
        raise UsageError(f"{out} holds files that are not a site (no index.html): give an empty or new folder")
    if args.notebooks and not Path(args.notebooks).is_dir():
        raise UsageError(f"--notebooks {args.notebooks}: not a folder")
    pages = build(out, notebooks=args.notebooks, quiet=args.quiet)
    print(f"wrote {out}/: index.html and {len(pages)} notebook pages; open {out / 'index.html'} in a browser")
    return 0


if __name__ == "__main__":  # python -m minilin.site: the same as python -m minilin site
    from minilin.__main__ import run
    run("site")
