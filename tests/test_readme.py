"""Every command the README and the notebooks show runs as written.

A command is any `python -m minilin ...` in README.md (fenced blocks and inline code) or in a notebook
(markdown code, `!` lines and comments of code cells). Each one is parsed by its subcommand's own argparse
parser, taken from `minilin.__main__.COMMANDS` (name -> (module, entry function, help)): the module exposes
`build_parser()` for the entry `main`, and `build_<name>_parser()` for an entry `<name>_main`
(e.g. `release_main` -> `build_release_parser`). Every flag must be spelled exactly (no prefix
abbreviations), every value must parse, and no placeholder (`N`, `DIR`, `<file>`, `[--x]`, `a|b`) may
stand where a learner would paste the line. The end-to-end test runs the documented train -> sample pair.
"""
import importlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minilin.__main__ import COMMANDS
from minilin.cli import UsageError

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PREFIX = "python -m minilin"
COMMAND = re.compile(r"python -m minilin(?![\w.])[^`\n]*")
SEPARATORS = {"&&", "||", ";", "|", ">", ">>", "2>&1"}


def markdown_code(text):
    """The code in a markdown text: the lines of fenced blocks, then inline `code` spans outside them."""
    fenced = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
    blocks = [m.group(1) for m in fenced.finditer(text)]
    inline = re.findall(r"`([^`\n]+)`", fenced.sub("", text))
    return [line for block in blocks for line in block.splitlines()] + inline


def notebook_code(path):
    """Code a learner would copy from a notebook: markdown code, and `!` lines and comments of code cells."""
    lines = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            lines += markdown_code(source)
        elif cell["cell_type"] == "code":
            lines += [line for line in source.splitlines() if line.lstrip().startswith(("!", "#"))]
    return lines


def commands_in(lines):
    """`python -m minilin ...` commands in code lines, each cut at a shell separator or a comment."""
    found = []
    for line in lines:
        for match in COMMAND.finditer(line):
            try:
                tokens = shlex.split(match.group(0), comments=True)
            except ValueError:  # an unbalanced quote: the command's text is broken
                tokens = [*PREFIX.split(), "<unparsable>", match.group(0)]
            cut = next((i for i, token in enumerate(tokens) if token in SEPARATORS), len(tokens))
            found.append(shlex.join(tokens[:cut]))
    return found


def documented_commands():
    """(where, command) for every command in README.md and the notebooks, in order, without repeats."""
    sources = [("README.md", markdown_code(README.read_text(encoding="utf-8")))]
    sources += [(f"notebooks/{nb.name}", notebook_code(nb)) for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    seen, out = set(), []
    for where, lines in sources:
        for command in commands_in(lines):
            if (where, command) not in seen:
                seen.add((where, command))
                out.append((where, command))
    return out


def parser_for(name):
    """The argparse parser of subcommand `name`, from the module and entry that `python -m minilin` runs."""
    module_name, entry, _ = COMMANDS[name]
    module = importlib.import_module(module_name)
    builder = "build_parser" if entry == "main" else f"build_{entry.removesuffix('_main')}_parser"
    assert hasattr(module, builder), (
        f"`python -m minilin {name}` runs {module_name}.{entry}; the test needs {module_name}.{builder}() "
        f"returning its argparse parser")
    return getattr(module, builder)()


PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$|^(\.\.\.|…)$|[<>\[\]{}|]")  # "256,512,...,4096" is a value


def check_command(command):
    """Raise AssertionError naming what a learner would hit if they pasted `command`."""
    args = shlex.split(command)[len(PREFIX.split()):]
    placeholders = [a for a in args if PLACEHOLDER.search(a)]
    assert not placeholders, f"placeholders {placeholders}: write a value a learner can paste"
    if not args or args[0] in ("-h", "--help"):
        return
    assert args[0] in COMMANDS, f"no subcommand {args[0]!r}; python -m minilin has {sorted(COMMANDS)}"
    parser = parser_for(args[0])
    options = parser._option_string_actions
    flags = [a.split("=", 1)[0] for a in args[1:] if a.startswith("-") and not re.fullmatch(r"-\d.*", a)]
    unknown = [f for f in flags if f not in options]
    assert not unknown, f"{args[0]} has no option {unknown}; its options: {sorted(o for o in options if o.startswith('--'))}"
    if "-h" in args or "--help" in args:
        return
    try:
        parsed = parser.parse_args(args[1:])
    except (UsageError, SystemExit) as err:
        pytest.fail(f"`{command}` is refused by its parser: {err}")
    methods = getattr(parsed, "methods", None)
    get_method = getattr(importlib.import_module(COMMANDS[args[0]][0]), "get_method", None)
    if getattr(parsed, "decode", False):  # bench --decode: its methods are the decoding ones
        from minilin.bench.decode import check_methods
        get_method = lambda name: check_methods([name])
    if args[0] == "bench" and isinstance(methods, str) and get_method is not None and "--methods" in args:
        for name in filter(None, (m.strip() for m in methods.split(","))):
            try:
                get_method(name)
            except ValueError as err:
                pytest.fail(f"`{command}`: {err}")


COMMANDS_DOCUMENTED = documented_commands()


def test_readme_and_notebooks_show_commands():
    where = {w for w, _ in COMMANDS_DOCUMENTED}
    assert "README.md" in where and "notebooks/00_start_here.ipynb" in where
    shown = {shlex.split(c)[3] for _, c in COMMANDS_DOCUMENTED if len(shlex.split(c)) > 3}
    assert {"grade", "train", "sample", "bench"} <= shown, f"the README shows only {sorted(shown)}"


@pytest.mark.parametrize("where, command", COMMANDS_DOCUMENTED, ids=[f"{w}: {c}" for w, c in COMMANDS_DOCUMENTED])
def test_documented_command_parses(where, command):
    check_command(command)


@pytest.mark.parametrize("command, problem", [
    ("python -m minilin train --checkpoint checkpoints/lm.pt", "no option"),
    ("python -m minilin grade --chapter N", "placeholders"),
    ("python -m minilin grade [--chapter 1]", "placeholders"),
    ("python -m minilin frobnicate", "no subcommand"),
    ("python -m minilin train --steps many", "refused"),
    ("python -m minilin bench --quick --methods exact,favor", "favor"),  # the old name of performer
    ("python -m minilin bench --decode --methods exact-kv-cache,linformer-k64", "linformer-k64"),
])
def test_the_check_catches_broken_commands(command, problem):
    with pytest.raises((AssertionError, pytest.fail.Exception), match=problem):
        check_command(command)


def test_commands_are_found_in_fenced_blocks_inline_code_and_notebook_shell_lines():
    text = "Run `python -m minilin grade --chapter 1` or\n\n```bash\npython -m minilin bench --quick   # 1 min\n```\n"
    assert commands_in(markdown_code(text)) == ["python -m minilin bench --quick", "python -m minilin grade --chapter 1"]
    assert commands_in(["!cd .. && python -m minilin grade --task 1.2 > out.txt"]) == [
        "python -m minilin grade --task 1.2"]


def quickstart():
    text = README.read_text(encoding="utf-8")
    start = text.index("## Quickstart")
    return text[start:text.index("\n## ", start + 1)]


@pytest.mark.needs_solutions
def test_quickstart_installs_into_a_virtual_environment_with_the_cpu_wheel_first():
    section = quickstart()
    lines = [line.strip() for line in markdown_code(section)]
    assert "python3 -m venv .venv" in lines and "py -m venv .venv" in lines  # Linux/macOS and Windows
    assert any(line.startswith(". .venv/bin/activate") for line in lines)
    assert any(".venv\\Scripts\\" in line for line in lines)
    cpu = next(i for i, line in enumerate(lines) if "--index-url https://download.pytorch.org/whl/cpu" in line)
    course = next(i for i, line in enumerate(lines) if line == 'pip install -e ".[course]"')
    assert cpu < course, "the CPU wheel must be installed before the course pulls a default (CUDA) torch"
    tests = [line for line in lines if line.startswith("pytest --nbval")]
    assert len(tests) == 1, tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests[0] in ci, f"CI must run the README's test command {tests[0]!r}"


def test_quickstart_opens_notebook_00_from_the_course_root():
    opens = [line for line in markdown_code(quickstart()) if line.startswith("jupyter lab")]
    assert opens, "the Quickstart must show how to open the course"
    for line in opens:
        words = shlex.split(line)
        # rooted at the course folder (given only a file, jupyter_server roots itself at the file's folder)
        assert "--ServerApp.root_dir=." in words, f"{line!r}: the file browser would not show the course folder"
        target = [w for w in words[2:] if not w.startswith("-")][-1]
        assert (ROOT / target).is_file(), f"{line!r}: no {target} in the course folder"
        assert target.startswith("notebooks/"), "run from the course root so exercises/ is reachable"


def test_results_are_ignored_by_git_but_reference_results_are_not():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")

    def ignored(path):
        return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT).returncode == 0

    assert ignored("results/local/bench.csv") and ignored("results/sweep.png")
    assert not ignored("results/reference/bench.csv")
    assert ignored("checkpoints/lm.pt")


def documented_train_and_sample():
    """The README's first `sample` command and the `train` command shown before it that writes its checkpoint
    (`--out` equal to sample's `--ckpt`, or no `--out`: train's default path)."""
    readme = [shlex.split(c) for w, c in COMMANDS_DOCUMENTED if w == "README.md"]
    at = next((i for i, args in enumerate(readme) if args[3:4] == ["sample"]), None)
    assert at is not None, "the README shows no sample command"
    sample = readme[at]
    assert "--ckpt" in sample, f"`{shlex.join(sample)}` names no checkpoint"
    ckpt = sample[sample.index("--ckpt") + 1]
    for args in reversed(readme[:at]):
        if args[3:4] == ["train"] and "--compare" not in args:
            if "--out" not in args or args[args.index("--out") + 1] == ckpt:
                return args, sample
    pytest.fail(f"no README train command before `{shlex.join(sample)}` writes {ckpt}")


def test_documented_train_then_sample_runs(tmp_path):
    train, sample = documented_train_and_sample()
    # The documented flags, then a tiny model and run so the test takes seconds (later flags win in argparse).
    tiny = ["--steps", "3", "--dim", "32", "--depth", "1", "--heads", "2", "--block-size", "32", "--batch-size", "4",
            "--eval-interval", "3", "--eval-batches", "1", "--no-progress"]
    run = dict(cwd=tmp_path, capture_output=True, text=True, timeout=300)
    trained = subprocess.run([sys.executable, *train[1:], *tiny], **run)
    assert trained.returncode == 0, trained.stderr[-2000:]
    ckpt = sample[sample.index("--ckpt") + 1]
    assert (tmp_path / ckpt).is_file(), f"`{shlex.join(train)}` wrote no {ckpt} (in the folder it ran in)"
    sampled = subprocess.run([sys.executable, *sample[1:], "--tokens", "20"], **run)
    assert sampled.returncode == 0, sampled.stderr[-2000:]
    assert sampled.stdout.strip(), "sample printed nothing"


def test_readme_says_where_grading_runs_as_the_grader_does(monkeypatch):
    """The grader refuses Windows and names WSL; the README's Windows install steps say the same."""
    import os
    import types

    import minilin.grade as grade
    monkeypatch.setattr(grade, "os", types.SimpleNamespace(name="nt", environ=os.environ, cpu_count=os.cpu_count))
    with pytest.raises(UsageError, match="WSL") as err:
        grade.main(["--chapter", "1"])
    section = quickstart()
    windows = section[section.index("On Windows (PowerShell)"):]
    assert "grading needs WSL" in windows and "WSL" in str(err.value)


def test_readme_times_are_the_measured_ones():
    """The time column of the README's command table shows what tests/readme_times.py measured on a 2-core
    machine (results/reference/readme_times.csv), rounded as that script rounds; every timed row has one."""
    import csv

    sys.path.insert(0, str(ROOT / "tests"))
    import readme_times

    with readme_times.OUT.open() as f:
        measured = {r["command"]: r for r in csv.DictReader(f)}
    rows = readme_times.timed_rows(README.read_text())
    assert len(rows) >= 10, "the README's command table lost its rows"
    for command, shown in rows:
        assert command in measured, f"no measured time for {command!r}: run python tests/readme_times.py --only ..."
        row = measured[command]
        assert row["cores"] == "2", f"{command!r} was timed on {row['cores']} cores; the README speaks of 2"
        assert shown == readme_times.readme_time(float(row["seconds"])), (
            f"README shows {shown!r} for {command!r}; measured {row['seconds']} s on {row['date']}")


def test_bench_help_quotes_the_measured_times():
    import csv

    sys.path.insert(0, str(ROOT / "tests"))
    import readme_times

    from minilin.bench import cli

    with readme_times.OUT.open() as f:
        measured = {r["command"]: float(r["seconds"]) for r in csv.DictReader(f)}
    assert cli.QUICK_TIME == readme_times.readme_time(measured["python -m minilin bench --quick"])
    assert cli.DEFAULT_TIME == readme_times.readme_time(measured["python -m minilin bench"])


SCANS_CSV = ROOT / "results" / "reference" / "causal-scans" / "bench-cpu-float32.csv"
SCAN_PAIRS = (("performer-causal", "sdpa-causal"), ("linear-causal", "sdpa-causal"),
              ("retention-causal", "linear-causal"), ("gla-causal", "linear-causal"),
              ("deltanet-causal", "linear-causal"), ("gated-deltanet-causal", "linear-causal"))


def scan_table_rows(path=SCANS_CSV):
    """The README's table of the causal scans, row by row, computed from the committed bench CSV."""
    from minilin.bench import load_csv, paired_ratio

    df = load_csv(path)
    lengths = sorted(set(df[df["metric"] == "time_fwd_round"]["n"]))
    rows = ["| time of | over the time of | " + " | ".join(f"n = {n}" for n in lengths) + " |",
            "|---|---|" + "---|" * len(lengths)]
    for method, base in SCAN_PAIRS:
        r = paired_ratio(df, method, base)
        rows.append(f"| `{method}` | `{base}` | "
                    + " | ".join(f"{r[n][0]:.2f} [{r[n][1]:.2f}, {r[n][2]:.2f}]" for n in lengths) + " |")
    return rows


def test_readme_scan_table_is_the_committed_run():
    text = README.read_text()
    for row in scan_table_rows():
        assert row in text, f"README lacks this row computed from {SCANS_CSV.name}: {row}"


HIDDEN_1_5 = '''import torch
from minilin.grading.checks import equal, hidden_check


@hidden_check("1.5")
def uniform_rows(saturated_rows):
    q = torch.ones(7, 3, 11, 4, dtype=torch.float64)  # equal scores: uniform rows, none saturated
    yield equal(saturated_rows(q, q), torch.zeros(7, 3, dtype=torch.float64))
'''


@pytest.mark.needs_solutions
def test_the_class_commands_run_as_printed_and_their_exports_agree(tmp_path):
    """README's three class commands, pasted into a folder holding what they name: a class of two (one task of
    chapter 1 broken for one of them), a rubric that weighs a hidden check, and that hidden check."""
    import csv
    text = README.read_text(encoding="utf-8")
    block = text[text.index("**A class.**"):]
    block = block[block.index("```bash\n") + 8:block.index("```", block.index("```bash\n") + 8)]
    commands = [line for line in block.splitlines() if line.startswith("python -m minilin grade")]
    assert len(commands) == 3, block
    solution = (ROOT / "solutions" / "ex01_attention.py").read_text(encoding="utf-8")
    broken = solution.replace("def saturated_rows(", "def _saturated_rows(") + \
        "\n\ndef saturated_rows(q, k, scale=None, threshold=0.99):\n    return _saturated_rows(q, k, scale, 0.5)\n"
    for student, source in (("ann", solution), ("bob", broken)):
        (tmp_path / "submissions" / student).mkdir(parents=True)
        (tmp_path / "submissions" / student / "ex01_attention.py").write_text(source, encoding="utf-8")
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "uniform.py").write_text(HIDDEN_1_5, encoding="utf-8")
    from minilin.grading.course import TASKS
    weights = [1] * len(TASKS["1.5"].public_steps) + [3]  # public checks, then the hidden one
    (tmp_path / "rubric.toml").write_text(f'[points]\n"1.5" = 4\n[weights]\n"1.5" = {weights}\n')
    for command in commands:
        args = shlex.split(command)
        proc = subprocess.run([sys.executable] + args[1:], cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}"
    assert sorted(p.name for p in (tmp_path / "feedback").iterdir()) == ["ann.md", "bob.md"]  # the first command's
    rows = list(csv.DictReader((tmp_path / "gradebook.csv").open(encoding="utf-8")))  # the second command's
    book = {s: round(sum(float(r["points"]) for r in rows if r["student"] == s), 6) for s in ("ann", "bob")}
    wide = {r["student"]: round(float(r["total"]), 6) for r in csv.DictReader((tmp_path / "grades.csv").open())}
    scores = {s: round(json.loads((tmp_path / "gradescope" / s / "results.json").read_text())["score"], 6)
              for s in ("ann", "bob")}
    assert book == wide == scores, (book, wide, scores)
    assert book["ann"] > book["bob"] > 0  # bob's 1.5 loses points; the rest of his chapter keeps them
    task = {r["student"]: r for r in rows if r["task"] == "1.5"}
    assert float(task["ann"]["max_points"]) == 4 and int(task["ann"]["checks_total"]) == len(weights)
