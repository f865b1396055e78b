"""What a learner reads in the notebooks: no stray tab characters in Markdown (a "\\t" from a non-raw string
where "\\times" was meant), no project-internal words, every heatmap with an explicit colour range, every code
cell executed in order with no stored error, no machine paths in outputs."""
import json
import math
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))

# Words that belong to how the course was made, not to what it teaches. "seed" alone is fine (random seeds);
# "anchor" is an internal name for a baseline; an "issue" is a tracker item unless it names a peer's thread
# (owner/repo#N), which is a citation.
INTERNAL = re.compile(r"\bthe issue'?s?\b|\bissue \d|\banchors?\b|seed articles?|\bthe session\b|\bthis session\b"
                      r"|not in our notes|\bthe targets? (?:are|is)\b|\bour notes\b", re.I)
HEATMAP = re.compile(r"\b(?:heatmap|imshow|matshow|pcolormesh)\(")


def cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell):
    return "".join(cell.get("source", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_has_no_tab_characters(path):
    bad = [i for i, c in enumerate(cells(path)) if c["cell_type"] == "markdown" and "\t" in source(c)]
    assert not bad, f"{path.name}: markdown cells {bad} contain a tab character (a '\\t' in a non-raw string?)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_project_internal_words(path):
    found = []
    for i, c in enumerate(cells(path)):
        texts = [source(c)] + ["".join(o.get("text", "")) for o in c.get("outputs", []) if "text" in o]
        for text in texts:
            found += [(i, m.group(0)) for m in INTERNAL.finditer(text)]
    assert not found, f"{path.name}: words a learner should not meet (cite the paper or library): {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_heatmap_has_an_explicit_colour_range(path):
    bad = []
    for i, c in enumerate(cells(path)):
        if c["cell_type"] != "code":
            continue
        src = source(c)
        for m in HEATMAP.finditer(src):
            call = src[m.end():m.end() + 400]
            if not re.search(r"\b(?:vmin|vmax|norm)\s*=", call) and "**shared" not in call and "**scale" not in call:
                bad.append(i)
    assert not bad, f"{path.name}: code cells {sorted(set(bad))} draw a heatmap without vmin/vmax (or norm)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_executed_in_order_without_errors_or_machine_paths(path):
    counts = []
    for i, c in enumerate(cells(path)):
        if c["cell_type"] != "code" or not source(c).strip():
            continue
        assert c.get("execution_count") is not None or "nbval-skip" in c.get("metadata", {}).get("tags", []), f"{path.name}: cell {i} never ran"
        if c.get("execution_count") is not None:
            counts.append(c["execution_count"])
        for out in c.get("outputs", []):
            assert out.get("output_type") != "error", f"{path.name}: cell {i} stores an error"
            text = "".join(out.get("text", [])) if isinstance(out.get("text"), list) else str(out.get("text", ""))
            assert not re.search(r"/(?:work|tmp|root)/", text), f"{path.name}: cell {i} prints a machine path"
    assert counts == sorted(counts), f"{path.name}: cells were executed out of order; restart and run all"


# ---------------------------------------------------------------------------------------------------------------
# One structure for every notebook from 01 on: the opening and the body, then these level-2 headings in this
# order; `## Exercises` where the chapter has an exercise file; `## Appendix...` optional and last.
ROOT = Path(__file__).resolve().parent.parent
TAIL = ("Check yourself", "Exercises", "Summary", "Try it yourself", "Answers")
CODE_FENCE = re.compile(r"```.*?```", re.S)


def level2_headings(path):
    """(cell index, heading text) of every level-2 Markdown heading, in order (code fences skipped)."""
    found = []
    for i, c in enumerate(cells(path)):
        if c["cell_type"] == "markdown":
            for line in CODE_FENCE.sub("", source(c)).splitlines():
                if line.startswith("## "):
                    found.append((i, line[3:].strip()))
    return found


def chapter(path):
    return int(path.name[:2])


def expected_tail(path):
    has_exercises = any((ROOT / "exercises").glob(f"ex{chapter(path):02d}_*.py"))
    return [h for h in TAIL if h != "Exercises" or has_exercises]


COURSE_NOTEBOOKS = [p for p in NOTEBOOKS if chapter(p) >= 1]


@pytest.mark.parametrize("path", COURSE_NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_ends_in_the_course_structure(path):
    titles = [t for _, t in level2_headings(path)]
    assert titles, f"{path.name}: no level-2 headings"
    body_end = titles.index("Check yourself") if "Check yourself" in titles else len(titles)
    body, tail = titles[:body_end], titles[body_end:]
    appendix = [t for t in tail if t.startswith("Appendix")]
    assert not [t for t in body if t in TAIL or t.startswith("Appendix")], (
        f"{path.name}: {body} — Exercises, Summary, Try it yourself, Answers and Appendix come after Check yourself")
    assert tail[:len(tail) - len(appendix)] == expected_tail(path), (
        f"{path.name}: the closing headings are {tail}; expected {expected_tail(path)} (then an optional "
        f"'## Appendix: ...' last)")
    assert all(t.startswith("Appendix") for t in tail[len(tail) - len(appendix):]), f"{path.name}: Appendix last"


@pytest.mark.parametrize("path", COURSE_NOTEBOOKS, ids=lambda p: p.stem)
def test_answers_are_folded(path):
    heads = level2_headings(path)
    start = next((i for i, t in heads if t == "Answers"), None)
    assert start is not None, f"{path.name}: no '## Answers' section"
    end = next((i for i, t in heads if i > start and t != "Answers"), len(cells(path)))
    text = "".join(source(c) for c in cells(path)[start:end] if c["cell_type"] == "markdown")
    assert text.count("<details>") >= 1 and text.count("<details>") == text.count("</details>"), (
        f"{path.name}: answers belong in <details> blocks, opened and closed")


def test_start_here_promises_the_structure_the_notebooks_have():
    text = " ".join(source(c) for c in cells(ROOT / "notebooks" / "00_start_here.ipynb"))
    positions = [text.find(f"*{h}*") for h in TAIL]
    assert -1 not in positions and positions == sorted(positions), (
        "00_start_here must name the closing sections, in order, as *Check yourself*, *Exercises*, *Summary*, "
        "*Try it yourself*, *Answers*")


# ---------------------------------------------------------------------------------------------------------------
# No number without a source. A measured-looking number in Markdown (a decimal, or a number with a unit of time,
# size, ratio or percent, or bits per byte) must appear, at the stated precision, in an output of the same
# notebook, in its code (a parameter it sets), or in a committed results/reference/ file the notebook reads; or
# be a paper's figure on the allow-list below, with its citation.
PAPER_FIGURES = {
    # number as written: citation
    "2006.04768": "arXiv id", "2009.14794": "arXiv id", "2006.16236": "arXiv id", "1812.01243": "arXiv id",
    "2011.04006": "arXiv id", "1810.04805": "arXiv id",
    "16 GB": "Linformer (arXiv 2006.04768) Table 3: a 16 GB V100",
    "4000x": "Katharopoulos et al. (arXiv 2006.16236): 'up to 4000x faster' autoregressive prediction",
}
for row in ("1.5x 1.7x 1.3x 3.0x 2.6x 6.1x 3.4x 14x 5.5x 28x 8.6x 56x 13x 20x 60x 1.6x 2.9x 2.4x 5.6x 3.2x 13x "
            "5.0x 26x 7.8x 48x 12x 18x 52x 1.8x 2.1x 3.6x 2.8x 8.3x 4.4x 17x 7.0x 32x 11x 36x 16x 40x 2.0x 2.2x "
            "4.3x 3.5x 8.5x 8.8x 14x 2.3x 4.5x 3.3x 8x 5.0x 7.9x").split():
    PAPER_FIGURES.setdefault(row, "Linformer (arXiv 2006.04768) Table 3, inference time/memory saved on a V100")
for value in ("36.37 64.27 57.46 42.44 71.40 54.39 35.70 53.94 52.27 38.56 76.34 51.36 18.01 65.40 53.82 42.77 "
              "77.05 51.41 16.13 65.90 53.09 42.34 75.30 50.55 0.85 2.65 5.51 9.48 0.37 0.55 0.99 0.59 0.82 1.06 "
              "1.4 7.7 8.0").split():
    PAPER_FIGURES.setdefault(value, "Long Range Arena (arXiv 2011.04006) Tables 1 and 3")
for value in ("92.25 91.75 92.08 92.30").split():
    PAPER_FIGURES.setdefault(value, "Linformer (arXiv 2006.04768) Table 2")
# Settings and library defaults the text names (not measurements), each with where it is set.
PAPER_FIGURES.update({
    "0.999": "torch.optim.AdamW's default betas=(0.9, 0.999) (PyTorch documentation)",
    "90 %": "minilin.data.train_val_split(val_fraction=0.1): the first 90 % of the corpus trains",
})

UNIT = r"(?:\s?(?:x\b|×|%|ms\b|µs\b|s\b|seconds?\b|min\b|minutes?\b|MiB\b|GiB\b|KiB\b|MB\b|GB\b|kB\b|KB\b|bits?\b))"
MEASURED = re.compile(r"(?<![\w.^_{-])(\d+(?:\.\d+)?)(" + UNIT + r")?(?![\w.]*\d)")
VERSIONISH = re.compile(r"\d+\.\d+\.\d+|\b\d{4}\.\d{4,5}\b|v\d+(?:\.\d+)+")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.I)


def _numbers(text):
    out = set()
    for m in NUMBER.finditer(text):
        try:
            out.add(float(m.group(0)))
        except ValueError:
            pass
    return out


def _sources(path):
    texts = []
    for c in cells(path):
        if c["cell_type"] != "code":
            continue
        texts.append(source(c))
        for o in c.get("outputs", []):
            if "text" in o:
                texts.append("".join(o["text"]))
            for key, value in o.get("data", {}).items():
                if key in ("text/plain", "text/html", "text/markdown"):
                    texts.append("".join(value))
    code = "\n".join(texts)
    for ref in sorted((ROOT / "results" / "reference").rglob("*")):
        if ref.is_file() and ref.name in code:
            texts.append(ref.read_text(encoding="utf-8", errors="replace"))
    return _numbers("\n".join(texts))


def _sourced(stated, decimals, known):
    scale = 10 ** decimals
    for x in known:
        for candidate in (x, 100 * x, x / 100):
            if abs(round(candidate * scale) - stated * scale) < 0.5 or abs(candidate - stated) < 0.5 / scale:
                return True
    return False


def unsourced_numbers(path):
    known = _sources(path)
    found = []
    for i, c in enumerate(cells(path)):
        if c["cell_type"] != "markdown":
            continue
        text = VERSIONISH.sub(" ", re.sub(r"https?://\S+|\[[^\]]*\]\([^)]*\)", lambda m: m.group(0).split("](")[0],
                                          source(c)))
        if i == 0:  # the opening's "about N minutes": estimates, the main line's checked by the budget test below
            text = STATED_MINUTES.sub(" ", text)
        if re.search(r"\b[Tt]asks?\s+\d+\.\d+", text):   # task numbers ("Task 7.1 ..., 7.2 ...") are not measurements
            text = re.sub(rf"\b{chapter(path)}\.\d\b", " ", text)
        text = re.sub(r"\b[Tt]asks?\s+\d+\.\d+(?:\s*[–-]\s*\d+\.\d+)?", " ", text)
        for m in MEASURED.finditer(text):
            number, unit = m.group(1), (m.group(2) or "").strip()
            if "." not in number and not unit:
                continue                        # a bare integer: a size, a count, an index, a year
            written = f"{number}{unit}" if unit in ("x", "×") else f"{number} {unit}".strip()
            if number in PAPER_FIGURES or written in PAPER_FIGURES or f"{number}x" in PAPER_FIGURES and unit == "×":
                continue
            decimals = len(number.split(".")[1]) if "." in number else 0
            if not _sourced(float(number), decimals, known):
                found.append((i, written))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_number_without_a_source(path):
    found = unsourced_numbers(path)
    assert not found, (f"{path.name}: numbers in the text that no output, code or committed file of this notebook "
                       f"holds (compute and print them, or cite the paper in PAPER_FIGURES): {found}")


# ---------------------------------------------------------------------------------------------------------------
# The learner's budget. A notebook's main line is every cell before its first `## Try it yourself`, `## Answers` or
# `## Appendix` heading: the chapter's sections plus Check yourself, Exercises and Summary. It holds at most
# 3,000 words of Markdown prose (display math, code and HTML tags not counted) and 400 non-blank lines of code, and
# its opening cell states "about N minutes", N no less than prose / 200 words a minute + code / 8 lines a minute.
# The Annotated Transformer tells the whole Transformer in about 3,000 words.
BUDGET_WORDS, BUDGET_CODE_LINES = 3000, 400
WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE = 200, 8
# Chapters whose rewrite into the budget has not landed yet: measured and reported (expected to fail), not skipped.
BUDGET_PENDING = {}
MAIN_LINE_END = re.compile(r"^##\s+(?:Try it yourself|Answers|Appendix)", re.I | re.M)
STATED_MINUTES = re.compile(r"\babout\s+(\d+)\s+minutes\b", re.I)


def prose_words(markdown):
    """Words of Markdown prose: display math, fenced and inline code and HTML tags removed; a word has a letter or
    a digit."""
    for pattern in (r"\$\$.*?\$\$", r"```.*?```", r"`[^`]*`", r"<[^>]+>"):
        markdown = re.sub(pattern, " ", markdown, flags=re.S)
    return sum(1 for w in markdown.split() if re.search(r"[A-Za-z0-9]", w))


def main_line(nb_cells):
    """(prose words, non-blank code lines) of the cells before the first Try it yourself / Answers / Appendix."""
    words = lines = 0
    for c in nb_cells:
        src = source(c)
        if c["cell_type"] == "markdown":
            if MAIN_LINE_END.search(CODE_FENCE.sub("", src)):
                break
            words += prose_words(src)
        elif c["cell_type"] == "code":
            lines += sum(1 for line in src.splitlines() if line.strip())
    return words, lines


def budget_problems(nb_cells):
    words, lines = main_line(nb_cells)
    problems = []
    if words > BUDGET_WORDS:
        problems.append(f"{words} words of prose (at most {BUDGET_WORDS:,})")
    if lines > BUDGET_CODE_LINES:
        problems.append(f"{lines} lines of code (at most {BUDGET_CODE_LINES})")
    opening = source(nb_cells[0]) if nb_cells and nb_cells[0]["cell_type"] == "markdown" else ""
    stated = STATED_MINUTES.search(opening)
    floor = math.floor(words / WORDS_PER_MINUTE + lines / CODE_LINES_PER_MINUTE)
    if not stated:
        problems.append("the opening cell states no 'about N minutes'")
    elif int(stated[1]) < floor:
        problems.append(f"the opening cell states about {stated[1]} minutes; reading and running the main line "
                        f"alone takes {floor} ({words} words / {WORDS_PER_MINUTE} + {lines} lines / "
                        f"{CODE_LINES_PER_MINUTE})")
    return problems


def budget_table():
    rows = ["notebook                             words  code lines  stated", "-" * 62]
    for path in NOTEBOOKS:
        nb = cells(path)
        words, lines = main_line(nb)
        stated = STATED_MINUTES.search(source(nb[0])) if nb and nb[0]["cell_type"] == "markdown" else None
        flag = "" if not budget_problems(nb) else ("  pending" if path.name[:2] in BUDGET_PENDING else "  OVER")
        rows.append(f"{path.stem:35s} {words:6,d} {lines:11d}  {(stated[1] + ' min') if stated else '-':>6s}{flag}")
    return "\n".join(rows)


def _budget_params():
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.xfail(reason=f"pending: {BUDGET_PENDING[p.name[:2]]}",
                                                                strict=True)] if p.name[:2] in BUDGET_PENDING else [])
            for p in NOTEBOOKS]


@pytest.mark.parametrize("path", _budget_params())
def test_main_line_within_the_learners_budget(path):
    problems = budget_problems(cells(path))
    assert not problems, f"{path.name}: main line over budget: {'; '.join(problems)}\n{budget_table()}"


def test_budget_table_prints_and_the_rule_can_fail(capsys):
    print(budget_table())
    assert len(budget_table().splitlines()) == len(NOTEBOOKS) + 2
    md = lambda text: {"cell_type": "markdown", "source": [text]}
    code = lambda n: {"cell_type": "code", "source": ["x = 1\n\n"] * n}
    ok = [md("# T\n\nAbout 3 minutes."), md("word " * 400 + "$$a b c$$ `x y` <b>"), code(8),
          md("## Appendix: why?\n" + "word " * 5000), code(900)]
    assert main_line(ok) == (404, 8) and budget_problems(ok) == []
    assert budget_problems([md("# T\n\nabout 1 minutes")] + ok[1:]) == [
        "the opening cell states about 1 minutes; reading and running the main line alone takes 3 "
        "(404 words / 200 + 8 lines / 8)"]
    long = [md("# T about 99 minutes"), md("word " * 3001), code(401)]
    assert budget_problems(long) == ["3005 words of prose (at most 3,000)", "401 lines of code (at most 400)"]
