"""The course site (`python -m minilin site`): built from the committed notebooks into a temporary folder, then
read as files and opened in the system Chromium.

Static checks: a page for every notebook, the table of contents in course order on the landing page (the
README), every link between pages resolves, no page loads a script or stylesheet from the network, no error
output, no paragraph left with a raw `$` or TeX command (display math written inside a paragraph, which
JupyterLab renders, is split out of it by the build). Browser checks (two pages, served over HTTP on 127.0.0.1):
every figure has loaded (natural width > 0), MathJax has typeset the math with no error (a formula that sat inside a
paragraph included), and a link to the next notebook leads to that page.
Skips when the site extra or Chromium is missing, unless MINILIN_REQUIRE_SITE=1 (CI), where that fails.
"""
import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest

from minilin import site

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
OPENED = ("01_exact_attention", "04_performer")  # two pages with math and figures


def missing(reason):
    if os.environ.get("MINILIN_REQUIRE_SITE") == "1":
        pytest.fail(f"{reason} (MINILIN_REQUIRE_SITE=1: the site test must run)")
    pytest.skip(reason)


class Links(HTMLParser):
    """Every href/src of a page, and the external scripts and stylesheets it loads."""

    def __init__(self):
        super().__init__()
        self.links, self.loads = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag in ("script", "img") and attrs.get("src"):
            self.loads.append(attrs["src"])
        if tag == "link" and attrs.get("rel") in ("stylesheet", "preload") and attrs.get("href"):
            self.loads.append(attrs["href"])


def parse(path):
    parser = Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if need := site.missing_packages():
        missing(f"the site extra is not installed ({', '.join(need)}): pip install -e \".[site]\"")
    out = tmp_path_factory.mktemp("site") / "html"
    pages = site.build(out, quiet=True)  # from this checkout, solutions/ and all: what `site --teacher` builds
    return out, pages


def test_a_page_for_every_notebook_and_the_readme_first(built):
    out, pages = built
    assert pages == [f"notebooks/{name}.html" for name in NOTEBOOKS]
    for page in pages:
        assert (out / page).is_file(), page
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "Quickstart" in index, "the landing page is the README"
    toc = [h for h in parse(out / "index.html").links if re.fullmatch(r"notebooks/\d\d_\w+\.html", h)]
    order = list(dict.fromkeys(toc))
    assert order == pages, f"the table of contents is not in course order: {order}"


def test_every_link_between_pages_resolves_and_nothing_loads_from_the_network(built):
    out, _ = built
    broken, remote = [], []
    for page in sorted(out.rglob("*.html")):
        parsed = parse(page)
        for href in parsed.links + parsed.loads:
            if re.match(r"[a-z]+:", href) or href.startswith("#"):
                if re.match(r"https?:", href) and href in parsed.loads:
                    remote.append(f"{page.relative_to(out)}: {href}")
                continue
            target = (page.parent / href.split("#")[0].split("?")[0]).resolve()
            if not target.exists():
                broken.append(f"{page.relative_to(out)} -> {href}")
    assert not broken, "links to files the site does not have:\n" + "\n".join(broken[:20])
    assert not remote, "pages that load from the network (the site must work offline):\n" + "\n".join(remote)


def test_pages_show_code_outputs_and_no_error(built):
    out, pages = built
    for page in pages:
        html = (out / page).read_text(encoding="utf-8")
        assert "cell_input" in html, f"{page}: no code cells"
        assert 'class="output traceback' not in html, f"{page}: an error output (traceback) is shown"
        stderr = re.findall(r'<div class="output stderr[^"]*">(.*?)</div>\s*</div>', html, re.S)
        failing = [s for s in stderr if re.search(r"Traceback \(most recent call last\)|\w+Error:", s)]
        assert not failing, f"{page}: a stderr output shows an error: {failing[0][:300]}"
        assert "Math Processing Error" not in html
    assert html.count("<img") > 0


# Display math inside a paragraph, as JupyterLab renders it (notebook 01, step 3): the sentence goes on after it.
IN_PARAGRAPH = ("Subtracting any constant $c$ from a row\nchanges nothing,\n"
                "$$\\frac{e^{s_j - c}}{\\sum_{j'} e^{s_{j'} - c}} = \\frac{e^{s_j}}{\\sum_{j'} e^{s_{j'}}},$$\n"
                "and with $c = \\max_j s_j$ every exponent is $\\le 0$.")


def test_display_math_inside_a_paragraph_is_given_a_block_of_its_own():
    text = site.display_math_as_blocks(IN_PARAGRAPH)
    before, formula, after = [p.strip() for p in text.split("\n\n")]
    assert before == "Subtracting any constant $c$ from a row\nchanges nothing,"
    assert formula.startswith("$$\\frac{e^{s_j - c}}") and formula.endswith("}},$$") and formula.count("$$") == 2
    assert after == "and with $c = \\max_j s_j$ every exponent is $\\le 0$."
    # in a list item the formula and the rest stay in the item (indented); code is left as written
    item = "- a **Gaussian**: its DFT is\n  $$e^{-f^2}$$ text after\n- next\n\n`$$x$$` and\n```\n$$y$$\n```\n"
    assert site.display_math_as_blocks(item) == ("- a **Gaussian**: its DFT is\n  \n  $$e^{-f^2}$$\n\n  text after\n"
                                                 "- next\n\n`$$x$$` and\n```\n$$y$$\n```\n")
    assert site.display_math_as_blocks(text).split() == text.split(), "a second pass changes nothing but blank lines"


def test_no_paragraph_shows_raw_dollars_or_tex(built):
    """A formula myst did not read as math leaves `$` and `\\command`s in the paragraph's text (it also pairs the
    dollars after it wrongly, so the paragraph's words run together inside "inline math")."""
    out, pages = built
    raw = []
    for page in pages:
        html = (out / page).read_text(encoding="utf-8")
        html = re.sub(r"<(pre|code|script|style)\b.*?</\1>", "", html, flags=re.S)
        html = re.sub(r'<(span|div) class="math notranslate nohighlight">.*?</\1>', "", html, flags=re.S)
        for block in re.findall(r"<(?:p|li)\b[^>]*>(.*?)</(?:p|li)>", html, re.S):
            text = re.sub(r"<[^>]+>", "", block)
            if "$" in text or re.search(r"\\[A-Za-z]+", text):
                raw.append(f"{page}: {text[:160]!r}")
    assert not raw, f"{len(raw)} paragraphs show raw TeX (math myst did not read):\n" + "\n".join(raw[:20])


def test_a_widget_shows_its_last_figure_and_a_note_not_its_python_repr(built):
    out, pages = built
    import json
    with_widgets = [name for name in NOTEBOOKS if site.WIDGET in (ROOT / "notebooks" / f"{name}.ipynb").read_text()]
    for name in with_widgets:
        html = (out / "notebooks" / f"{name}.html").read_text(encoding="utf-8")
        assert site.WIDGET_NOTE in html and "VBox(children" not in html and "widget-state" not in html, name
        nb = site.static_widgets(json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8")))
        images = [o for c in nb["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
        assert images, name


@pytest.fixture(scope="module")
def server(built):
    out, _ = built
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from test_browser import chromium_page
    yield from chromium_page(tmp_path_factory.mktemp("site-chromium"), 1300, 900, missing=missing)


PAGE_STATE = """() => ({
  images: [...document.querySelectorAll('img')].map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]),
  typeset: document.querySelectorAll('.MathJax, .MathJax_Display, .MathJax_SVG').length,
  raw: [...document.querySelectorAll('span.math')].filter(s => !s.querySelector('script, .MathJax')
         && /\\\\\\(|\\\\\\[/.test(s.textContent)).length,
  errors: document.querySelectorAll('.MathJax_Error, merror').length,
  prose_tex: [...document.querySelectorAll('article p, article li')].map(e => {
      const c = e.cloneNode(true);
      c.querySelectorAll('code, pre, script, .MathJax_Preview').forEach(x => x.remove());
      return c.textContent;
    }).filter(t => /\\$|\\\\[A-Za-z]+/.test(t)),
  title: document.title,
})"""

# The paragraph of IN_PARAGRAPH on notebook 01's page: the formula after "changes nothing," and the sentence after it.
SPLIT_FORMULA = """() => {
  const p = [...document.querySelectorAll('article p')].find(e => e.textContent.includes('Subtracting any constant'));
  const formula = p.nextElementSibling, rest = formula.nextElementSibling;
  const shown = e => {
    const c = e.cloneNode(true);
    c.querySelectorAll('script, .MathJax_Preview').forEach(x => x.remove());
    return c.textContent;
  };
  return {display: formula.querySelectorAll('.MathJax_Display').length, formula_source:
            [...formula.querySelectorAll('script[type="math/tex; mode=display"]')].map(s => s.textContent),
          rest: shown(rest), rest_typeset: rest.querySelectorAll('.MathJax').length,
          rest_width: Math.min(...[...rest.querySelectorAll('.MathJax')].map(m => m.getBoundingClientRect().width))};
}"""


@pytest.mark.browser
@pytest.mark.parametrize("name", OPENED)
def test_a_page_in_chromium_has_its_figures_and_typeset_math(server, page, name):
    page.goto(f"{server}/notebooks/{name}.html", wait_until="load")
    page.wait_for_function("() => window.MathJax && MathJax.Hub && MathJax.isReady "
                           "&& MathJax.Hub.queue.pending === 0 && MathJax.Hub.queue.running === 0")
    page.wait_for_function("() => [...document.images].every(i => i.complete)")
    state = page.evaluate(PAGE_STATE)
    assert state["images"], f"{name}: no figures on the page"
    unloaded = [src for src, complete, width in state["images"] if not width]
    assert not unloaded, f"{name}: figures that did not load: {unloaded}"
    assert state["typeset"] > 10, f"{name}: MathJax typeset {state['typeset']} formulas"
    assert state["raw"] == 0, f"{name}: {state['raw']} formulas left as raw TeX"
    assert state["errors"] == 0, f"{name}: {state['errors']} MathJax errors"
    assert not state["prose_tex"], f"{name}: paragraphs showing raw TeX: {state['prose_tex'][:3]}"
    if name == "01_exact_attention":  # a formula written inside a paragraph: displayed, and the sentence goes on
        split = page.evaluate(SPLIT_FORMULA)
        assert split["display"] == 1 and "\\frac{e^{s_j - c}}" in split["formula_source"][0], split
        assert split["rest"].startswith("and with ") and "every exponent is" in split["rest"], split
        assert "$" not in split["rest"] and "\\" not in split["rest"], split
        assert split["rest_typeset"] == 2 and split["rest_width"] > 0, split
    following = NOTEBOOKS[NOTEBOOKS.index(name) + 1]
    page.locator(f"a.next-page[href$='{following}.html']").first.click()
    page.wait_for_url(re.compile(f"{following}\\.html$"))
    assert page.evaluate("() => document.querySelectorAll('.cell').length") > 0


@pytest.mark.needs_solutions
def test_site_refuses_the_teachers_copy_without_teacher(tmp_path):
    assert (ROOT / "solutions").is_dir(), "this test runs in the teacher's copy of the course"
    proc = subprocess.run([sys.executable, "-m", "minilin", "site", str(tmp_path / "html")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "solutions/" in lines[0] and "--teacher" in lines[0] and "release" in lines[0], lines
    assert not (tmp_path / "html").exists()
