"""The grader: a class of adversarial submissions, the learner's and the teacher's commands, honesty checks,
the student release and its GitHub Classroom workflow.

The class is graded once (module fixture) by the real command in a subprocess, with a 20 s limit per chapter.
Where bwrap works, one student also tries to delete and write files outside its folder; CI sets
MINILIN_REQUIRE_SANDBOX=1, which turns a missing sandbox into a failure instead of a skip.
"""
import ast
import csv
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import torch
import yaml

from minilin.cli import UsageError
from minilin.grade import build_parser
from minilin.grade import main as grade
from minilin.grading import honesty, report, sandbox
from minilin.grading.calls import dumps, loads_untrusted
from minilin.grading.checks import Failure, compare
from minilin.grading.course import CHAPTERS, COURSE_CHAPTERS, TASKS, WITHOUT_EXERCISES, load_hidden, select
from minilin.grading.release import grade_command, step_id, write_stubs
from minilin.grading.runner import STATUSES, run_in_process

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 45  # seconds per chapter for the class below (a 2-core runner at load 15 took over 20 s on chapter 4)
SANDBOXED, NO_SANDBOX_REASON = sandbox.bwrap_status()


def minilin(*args, cwd=ROOT, timeout=900):
    env = {**os.environ, "TQDM_DISABLE": "1"}
    return subprocess.run([sys.executable, "-m", "minilin", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def source(folder, chapter):
    return (ROOT / folder / CHAPTERS[chapter].file).read_text(encoding="utf-8")


def stub_source(chapter):
    """The chapter's exercise file as released (every task function a stub), whatever exercises/ holds now."""
    with tempfile.TemporaryDirectory() as folder:
        write_stubs(ROOT / "exercises", folder)  # as `release` writes them
        return (Path(folder) / CHAPTERS[chapter].file).read_text(encoding="utf-8")


def callers(source, name):
    """The top-level functions of `source` that call `name`, directly or through the file's other functions."""
    defs = {n.name: {c.func.id for c in ast.walk(n) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    found, grew = {name}, True
    while grew:
        new = {f for f, calls in defs.items() if calls & found} - found
        found, grew = found | new, bool(new)
    return found


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_sandbox_is_available_where_ci_requires_it():
    if not SANDBOXED:
        if os.environ.get("MINILIN_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"MINILIN_REQUIRE_SANDBOX=1 but the grader cannot sandbox: {NO_SANDBOX_REASON}")
        pytest.skip(f"no sandbox here, the grader runs learner code unsandboxed: {NO_SANDBOX_REASON}")
    assert sandbox.choose("auto")[0] == "bwrap"


# --- a class of synthetic submissions ------------------------------------------------------------------
WRONG_1_5 = ("import torch\ndef saturated_rows(q, k, scale=None, threshold=0.99):\n"
             "    return torch.zeros(q.shape[:2], dtype=torch.float64)\n")
EXIT_AND_LOOP = """
import sys
def causal_mask(n, m, prefix=0):
    sys.exit(1)
def saturated_rows(q, k, scale=None, threshold=0.99):
    while True:
        pass
"""
PATCHER = '''"""Patches the grader, its checks and torch at import, then answers wrongly."""
import importlib
import torch
import torch.testing
torch.testing.assert_close = lambda *args, **kwargs: None
torch.equal = lambda *args, **kwargs: True
torch.log_softmax = lambda *args, **kwargs: 0  # would break chapter 7's lm_loss if it leaked out of chapter 1
for name in ("mini" + "lin.grade", "mini" + "lin.grading.checks", "mini" + "lin.grading.runner"):
    module = importlib.import_module(name)
    for attr in ("main", "compare", "expect_close", "expect", "judge", "close", "equal"):
        if hasattr(module, attr):
            setattr(module, attr, lambda *args, **kwargs: None)
def scaled_scores(q, k):
    return torch.zeros(q.shape[:-1] + (k.shape[-2],), dtype=q.dtype)
def stable_softmax(scores, dim=-1):
    return torch.zeros_like(scores)
def causal_mask(n, m, prefix=0):
    return torch.ones(n, m, dtype=torch.bool)
def attention(q, k, v, mask=None, causal=False):
    return torch.zeros_like(q[..., :1]).expand(*q.shape[:-1], v.shape[-1])
def saturated_rows(q, k, scale=None, threshold=0.99):
    return 0
'''
VANDAL = """
import os, pathlib, shutil
for target in {targets!r}:
    try:
        os.remove(target)
    except Exception:
        pass
for folder in {folders!r}:
    shutil.rmtree(folder, ignore_errors=True)
for path in {writes!r}:
    try:
        pathlib.Path(path).write_text("def scaled_scores(q, k):\\n    return 0\\n")
    except Exception:
        pass
"""
HONESTY = """
from minilin.attention import softmax_attention as reference
def attention(q, k, v, mask=None, causal=False):
    return reference(q, k, v, mask=mask, causal=causal)
"""
NO_CAUSAL = "if False:  # the learner forgot the causal flag\n"
HUGE = "import torch\ndef saturated_rows(q, k, scale=None, threshold=0.99):\n    return torch.zeros(30_000_000)\n"
HIDDEN_CHECK = '''
from pathlib import Path
import torch
from minilin.grading.checks import check, expect, hidden_check

@hidden_check("1.3")
def small_mask(causal_mask):
    call = causal_mask(2, 2)
    def judge(got):
        Path({marker!r}).touch()  # the teacher's check ran, in the grader
        expect(torch.equal(got, torch.tensor([[True, False], [True, True]])), call, "not lower triangular")
    yield check(call, judge=judge)
'''
IDS1, IDS7 = {t.id for t in select([1])}, {t.id for t in select([7])}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """Build the class, grade it with the teacher's command, return what it wrote and what each deserves."""
    base = tmp_path_factory.mktemp("class")
    klass, home, hidden = base / "submissions", base / "home", base / "hidden"
    home.mkdir()
    (home / "notes.txt").write_text("a file in someone's home")
    hidden.mkdir()
    (hidden / "extra.py").write_text(HIDDEN_CHECK.format(marker=str(base / "hidden-ran")))
    sol = {c: source("solutions", c) for c in CHAPTERS}
    students = {  # name -> ({file: text}, task ids that must pass)
        "alice": ({CHAPTERS[c].file: sol[c] for c in CHAPTERS}, set(TASKS)),
        "bob": ({"ex01_attention.py": sol[1] + WRONG_1_5}, IDS1 - {"1.5"}),
        "carol": ({"ex01_attention.py": sol[1] + EXIT_AND_LOOP, "ex07_lm.py": sol[7]}, {"1.1", "1.2"} | IDS7),
        "dave": ({"ex01_attention.py": "import os\nos._exit(3)\n" + sol[1], "ex07_lm.py": sol[7]}, IDS7),
        "erin": ({"ex01_attention.py": PATCHER, "ex07_lm.py": sol[7]}, IDS7),
        "grace": ({"ex01_attention.py": sol[1] + HONESTY}, IDS1 - {"1.4"}),
        "heidi": ({"ex01_attention.py": "def scaled_scores(q, k)\n    return q\n", "ex07_lm.py": sol[7]}, IDS7),
        "ivan": ({"ex01_attention.py": sol[1] + HUGE}, IDS1 - {"1.5"}),
        "judy": ({"ex01_attention.py": stub_source(1)}, set()),
    }
    ignores_causal = sol[1].replace("    if causal:\n", "    " + NO_CAUSAL, 1)  # Task 1.4, everything else right
    assert ignores_causal != sol[1]
    owner = {f: t.id for t in TASKS.values() if t.chapter == 1 for f in t.functions}
    students["kate"] = ({"ex01_attention.py": ignores_causal},
                        IDS1 - {owner[f] for f in callers(sol[1], "attention") if f in owner})
    canary = ROOT / "tests" / f".grade-canary-{uuid.uuid4().hex}"
    written = ROOT / "tests" / f"vandal-{uuid.uuid4().hex}.py"
    if SANDBOXED:  # only where the sandbox holds: unsandboxed, these writes would succeed
        canary.write_text("must survive")
        alice = klass / "alice"
        vandal = VANDAL.format(targets=[str(home / "notes.txt"), str(canary), str(alice / "ex01_attention.py")],
                               folders=[str(home), str(alice)], writes=[str(written), str(alice / "ex07_lm.py")])
        students["frank"] = ({"ex01_attention.py": vandal + sol[1]}, IDS1)
    for name, (files, _) in students.items():
        (klass / name).mkdir(parents=True)
        for file, text in files.items():
            (klass / name / file).write_text(text)
    alice_before = {p.name: sha(p) for p in (klass / "alice").iterdir()}
    rubric = base / "rubric.toml"
    rubric.write_text('default = 1\n[points]\n"1" = 2\n"7.6" = 3\n')
    out, feedback = base / "gradebook.csv", base / "feedback"
    start = time.monotonic()
    try:
        proc = minilin("grade", "--submissions", str(klass), "--out", str(out), "--feedback", str(feedback),
                       "--rubric", str(rubric), "--timeout", str(TIMEOUT), "--jobs", "2",
                       "--hidden-tests", str(hidden))
        elapsed = time.monotonic() - start
        damage = {"canary": SANDBOXED and not canary.exists(), "written": written.exists(),
                  "home": not (home / "notes.txt").exists(),
                  "alice": {p.name: sha(p) for p in (klass / "alice").iterdir()} != alice_before}
    finally:
        canary.unlink(missing_ok=True)
        written.unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return dict(proc=proc, rows=rows, students=students, elapsed=elapsed, damage=damage, feedback=feedback,
                points=report.load_rubric(rubric), hidden_ran=(base / "hidden-ran").exists())


def by_student(rows):
    table = {}
    for row in rows:
        table.setdefault(row["student"], {})[row["task"]] = row
    return table


@pytest.mark.needs_solutions
def test_every_student_gets_exactly_the_points_deserved(graded_class):
    rows, points = graded_class["rows"], graded_class["points"]
    assert list(rows[0]) == list(report.CSV_COLUMNS)
    assert list(report.CSV_COLUMNS[3:6]) == ["max_points", "checks_passed", "checks_total"]
    assert {r["status"] for r in rows} <= set(STATUSES)
    table = by_student(rows)
    assert set(table) == set(graded_class["students"])
    for name, (files, deserved) in graded_class["students"].items():
        assert set(table[name]) == set(TASKS), name  # one row per task, every student
        passed = {t for t, row in table[name].items() if row["status"] == "pass"}
        assert passed == deserved, (name, {t: table[name][t]["message"] for t in passed ^ deserved})
        for task_id, row in table[name].items():
            assert float(row["max_points"]) == points[task_id]
            passed_checks, total = int(row["checks_passed"]), int(row["checks_total"])
            assert 0 <= passed_checks <= total and total > 0, (name, task_id, row)
            assert (passed_checks == total) == (row["status"] == "pass"), (name, task_id, row)
            # partial credit: the share of the task's checks that pass (the CSV rounds to 4 decimals)
            assert float(row["points"]) == pytest.approx(points[task_id] * passed_checks / total, abs=1e-4), row
            if CHAPTERS[TASKS[task_id].chapter].file not in files:
                assert row["status"] == "missing", (name, task_id)


@pytest.mark.needs_solutions
def test_each_failure_says_what_went_wrong(graded_class):
    t = by_student(graded_class["rows"])
    assert t["bob"]["1.5"]["status"] == "fail" and "entries differ" in t["bob"]["1.5"]["message"]
    assert t["carol"]["1.3"]["status"] == "error" and "SystemExit" in t["carol"]["1.3"]["message"]
    carol = t["carol"]["1.4"]  # attention(causal=True) calls the exiting causal_mask; without causal it works
    assert carol["status"] == "fail" and "SystemExit" in carol["message"]
    assert 0 < int(carol["checks_passed"]) < int(carol["checks_total"])
    assert t["carol"]["1.5"]["status"] == "timeout" and f"{TIMEOUT} s" in t["carol"]["1.5"]["message"]
    assert all(t["dave"][i]["status"] == "crash" and "code 3" in t["dave"][i]["message"] for i in IDS1)
    # its patches live and die in its own process: nothing of chapter 1 passes, chapter 7 is untouched
    assert all(t["erin"][i]["status"] in ("fail", "error") for i in IDS1)
    assert t["grace"]["1.4"]["status"] == "fail" and "minilin.attention.softmax_attention" in \
        t["grace"]["1.4"]["message"]
    assert all(t["heidi"][i]["status"] == "error" and "SyntaxError in ex01_attention.py line 1" in
               t["heidi"][i]["message"] for i in IDS1)
    assert t["ivan"]["1.5"]["status"] == "crash" and "MiB" in t["ivan"]["1.5"]["message"]
    assert all(t["judy"][i]["message"].startswith("not implemented yet") for i in IDS1)
    assert graded_class["hidden_ran"]


@pytest.mark.needs_solutions
def test_a_task_that_ignores_the_causal_flag_earns_partial_credit(graded_class):
    """Task 1.4 right except for causal=True: some checks pass, so some of its points, never all."""
    row = by_student(graded_class["rows"])["kate"]["1.4"]
    assert row["status"] == "fail" and "causal=True" in row["message"]
    assert 0 < float(row["points"]) < graded_class["points"]["1.4"]
    assert 0 < int(row["checks_passed"]) < int(row["checks_total"])
    text = (graded_class["feedback"] / "kate.md").read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("| 1.4 |"))
    assert f"| {row['checks_passed']}/{row['checks_total']} |" in line and "failed check" in line
    assert f"{row['checks_passed']} of {row['checks_total']} checks; failed: check " in text


@pytest.mark.needs_solutions
def test_grading_is_bounded_and_leaves_everything_else_alone(graded_class):
    # 11 students, 2 at a time, one hang of TIMEOUT s: a wide bound that still catches a grader that waits forever
    assert graded_class["elapsed"] < 400
    assert not any(graded_class["damage"].values()), graded_class["damage"]


@pytest.mark.needs_solutions
def test_feedback_and_summary_per_student(graded_class):
    out = graded_class["proc"].stdout
    for name in graded_class["students"]:
        text = (graded_class["feedback"] / f"{name}.md").read_text(encoding="utf-8")
        assert text.startswith(f"# Feedback: {name}") and "| task | function | points | status |" in text
        assert any(line.startswith(name) and "points" in line for line in out.splitlines())
    assert "## Task 1.4" in (graded_class["feedback"] / "grace.md").read_text(encoding="utf-8")
    assert "allowed minilin helpers" in (graded_class["feedback"] / "grace.md").read_text(encoding="utf-8")
    assert out.splitlines()[0].startswith("sandbox: ")


# --- the learner's command, usage errors -------------------------------------------------------------
def test_usage_errors_name_the_fix(tmp_path):
    past = COURSE_CHAPTERS[-1] + 1  # one chapter past the course's last
    cases = {("--chapter", str(past)): f"no chapter {past}",
             ("--task", "1.9"): "no task '1.9'", ("--out", "x.csv"): "--out is for grading a class",
             ("--submissions", str(tmp_path / "nope"), "--out", "g.csv"): "no such folder",
             ("--timeout", "0"): "positive"}
    (tmp_path / "class" / "ann").mkdir(parents=True)
    cases[("--submissions", str(tmp_path / "class"))] = "needs --out"
    cases[("--submissions", str(tmp_path / "class"), "--out", str(tmp_path / "no" / "g.csv"))] = "existing folder"
    cases.update({("--chapter", str(c)): f"chapter {c} has no exercises" for c in WITHOUT_EXERCISES})
    for argv, words in cases.items():
        with pytest.raises(UsageError, match=words.replace("(", r"\(")):
            grade(list(argv))
    proc = minilin("grade", "--chapter", str(past))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and f"no chapter {past}" in proc.stderr


def test_help_lists_the_allowed_helpers_per_chapter():
    text = build_parser().format_help()
    for chapter in CHAPTERS.values():
        assert f"chapter {chapter.number} ({chapter.file}): allowed minilin helpers" in text
    assert "minilin.attention.softmax_attention" in text
    assert (f"chapters {', '.join(map(str, WITHOUT_EXERCISES))} have none" in text) == bool(WITHOUT_EXERCISES)
    assert "checks_passed,\nchecks_total" in text and "partial credit" in text and "[weights]" in text


def test_rubric_errors(tmp_path):
    for text, words in [('"1.1" = 2', "unknown keys"), ('[points]\n"9.9" = 1', "neither a task"),
                        ('[points]\n"1.1" = -1', ">= 0"), ("default = [", "not valid TOML"),
                        ('[weights]\n"9.9" = [1]', "not a task"), ('[weights]\n"1.1" = 2', "list of numbers"),
                        ('[weights]\n"1.1" = [0, 0]', "weight > 0"), ('[weights]\n"1.1" = [1, -1]', ">= 0")]:
        (tmp_path / "r.toml").write_text(text)
        with pytest.raises(UsageError, match=words):
            report.load_rubric(tmp_path / "r.toml")


def test_rubric_weights_score_each_check(tmp_path):
    from minilin.grading.runner import Result
    count = len(TASKS["1.4"].steps())
    weights = [1] * (count - 1) + [count - 1]  # the last check is worth all the others together
    (tmp_path / "r.toml").write_text(f'[points]\n"1.4" = 4\n[weights]\n"1.4" = {weights}\n')
    points = report.load_rubric(tmp_path / "r.toml")
    report.check_weights(points, {"1.4": count})
    last_fails = Result("1.4", "fail", "x", checks=(True,) * (count - 1) + (False,))
    assert report.earned(last_fails, 4, points.weights["1.4"]) == pytest.approx(2.0)
    assert report.rows("ann", {"1.4": last_fails}, points).__next__()["points"] == "2"
    assert report.earned(last_fails, 4) == pytest.approx(4 * (count - 1) / count)  # equal weights
    with pytest.raises(UsageError, match=f"give {count + 1} weights, one per check"):
        report.check_weights(points, {"1.4": count + 1}, "--rubric r.toml")
    (tmp_path / "bad.toml").write_text(f'[weights]\n"1.4" = {[1] * (count + 2)}\n')
    (tmp_path / "sub").mkdir()
    proc = minilin("grade", "--task", "1.4", "--folder", str(tmp_path / "sub"), "--gradescope-json",
                   str(tmp_path / "r.json"), "--rubric", str(tmp_path / "bad.toml"))
    assert proc.returncode == 2 and f"has {count} checks: give {count} weights" in proc.stderr, proc.stderr


# --- what crosses the boundary, and the checks themselves ------------------------------------------------
class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_the_grader_refuses_pickles_that_run_code():
    with pytest.raises(pickle.UnpicklingError):
        loads_untrusted(dumps({"ok": True, "value": Evil()}))
    assert torch.equal(loads_untrusted(dumps({"v": torch.ones(2)}))["v"], torch.ones(2))


def test_a_failed_comparison_says_where_and_by_how_much():
    got, expected = torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)
    got[1, 2] = 0.5
    message = compare(got, expected, atol=1e-10)
    assert "1 of 6 entries differ" in message and "largest difference 0.5 at index (1, 2)" in message
    assert "shape (2, 3), expected (3,)" in compare(got, torch.zeros(3, dtype=torch.float64))
    assert "expected the Python int 4" in compare(torch.tensor(4), 4)


@pytest.mark.needs_solutions
def test_every_task_grades_functions_the_stub_and_solution_define():
    assert set(COURSE_CHAPTERS) - set(CHAPTERS) == set(WITHOUT_EXERCISES)
    assert {int(p.name[:2]) for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")} - {0} == set(COURSE_CHAPTERS)
    for chapter in CHAPTERS.values():
        functions = [f for t in chapter.tasks.values() for f in t.functions]
        stubs, solved = honesty.top_level_functions(stub_source(chapter.number)), \
            honesty.top_level_functions(source("solutions", chapter.number))
        assert set(functions) <= set(stubs) and set(functions) <= set(solved), chapter.file
        assert honesty.scan(source("solutions", chapter.number), functions, chapter.allowed) == {}
        tasks_of = {f: t.id for t in chapter.tasks.values() for f in t.functions}
        stubbed = honesty.stubify(source("solutions", chapter.number), tasks_of)
        assert honesty.pristine(stubbed, functions), chapter.file  # what `release` does to a solved file


def test_honesty_scan_sees_through_aliases_and_strings():
    functions = ["scaled_scores", "stable_softmax", "causal_mask", "attention", "score_matrix_bytes"]
    code = textwrap.dedent("""
        import importlib
        import minilin as m
        from minilin import softmax_attention
        from minilin.attention import attention_matrix as helper
        def _inner(q):
            return helper(q, q)
        def scaled_scores(q, k):
            return _inner(q)
        def stable_softmax(x, dim=-1):
            return m.attention.attention_matrix(x, x)
        def causal_mask(n, m):
            return importlib.import_module("minilin.attention").allowed_keys(n, m)
        attention = softmax_attention
        def score_matrix_bytes(b, h, n, d):
            from solutions.ex01_attention import score_matrix_bytes
            return score_matrix_bytes(b, h, n, d)
    """)
    found = honesty.scan(code, functions)
    assert set(found) == set(functions)
    assert "minilin.attention.attention_matrix" in found["scaled_scores"]  # through a helper of the file
    assert "the reference solutions" in found["score_matrix_bytes"]
    allowed = "from minilin import softmax_attention\ndef attention(q, k, v):\n    return softmax_attention(q, k, v)\n"
    assert honesty.scan(allowed, ["attention"], CHAPTERS[3].allowed) == {}  # a re-export of the allowed helper
    assert honesty.scan(allowed, ["attention"], CHAPTERS[1].allowed)


@pytest.mark.needs_solutions
def test_hidden_checks_are_added_to_a_task(tmp_path):
    (tmp_path / "extra.py").write_text(textwrap.dedent("""
        from minilin.grading.checks import equal, hidden_check
        @hidden_check("1.5")
        def none_saturated(saturated_rows):
            import torch
            q = torch.ones(1, 1, 2, 4, dtype=torch.float64)
            yield equal(saturated_rows(q, q), torch.ones(1, 1, dtype=torch.float64), what="a wrong expectation")
    """))
    extra = load_hidden(tmp_path)
    import solutions.ex01_attention as solved
    with pytest.raises(Failure, match="a wrong expectation"):
        run_in_process(TASKS["1.5"], solved, extra["1.5"])
    (tmp_path / "bad.py").write_text("from minilin.grading.checks import hidden_check\nhidden_check('9.9')(print)\n")
    with pytest.raises(UsageError, match="does not exist"):
        load_hidden(tmp_path)


# --- the student release ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "course"
    proc = minilin("release", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_release_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "x").write_text("keep me")
    with pytest.raises(UsageError, match="not empty"):
        from minilin.grading.release import main as release_main
        release_main([str(tmp_path)])
    assert (tmp_path / "x").read_text() == "keep me"


@pytest.mark.needs_solutions
def test_release_has_stubs_and_no_solutions(release):
    assert not (release / "solutions").exists() and (release / "minilin" / "grading" / "child.py").is_file()
    for chapter in CHAPTERS.values():
        text = (release / "exercises" / chapter.file).read_text(encoding="utf-8")
        assert honesty.pristine(text, [f for t in chapter.tasks.values() for f in t.functions])


@pytest.mark.needs_solutions
def test_release_ships_the_license_and_the_results_its_notebooks_read(release):
    assert (release / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    for path in sorted((ROOT / "results" / "reference").rglob("*")):
        if path.is_file():
            copied = release / path.relative_to(ROOT)
            assert copied.is_file() and copied.read_bytes() == path.read_bytes(), copied


@pytest.mark.needs_solutions
def test_release_classroom_workflow_grades_every_task(release):
    workflow = yaml.safe_load((release / ".github" / "workflows" / "classroom.yml").read_text(encoding="utf-8"))
    steps = workflow["jobs"]["run-autograding-tests"]["steps"]
    (grading,) = [s for s in steps if "minilin" in s.get("run", "") and "pip install" not in s["run"]]  # one run
    assert grading["run"].startswith("python -m minilin.grading.classroom") and grading["timeout-minutes"] > 0
    reporter = steps[-1]
    assert reporter["uses"].startswith("classroom-resources/autograding-grading-reporter")
    assert reporter["with"]["runners"].split(",") == [step_id(t) for t in sorted(TASKS, key=lambda t: tuple(
        map(int, t.split("."))))]
    assert set(reporter["env"]) == {f"{step_id(t).upper()}_RESULTS" for t in TASKS}
    assert all(f"steps.{grading['id']}.outputs." in value for value in reporter["env"].values())
    assert "push" in workflow["on"]  # quoted: YAML 1.1 would read a bare `on` as True


@pytest.mark.needs_solutions
def test_release_grades_the_students_files_and_its_tests_pass(release):
    proc = minilin("grade", cwd=release)  # untouched stubs: every task fails, not implemented yet
    assert proc.returncode == 1, proc.stderr
    n = len(TASKS)
    assert f"score: 0/{n} points (0%), 0/{n} tasks pass [exercises]" in proc.stdout
    assert proc.stdout.count("not implemented yet") >= len(TASKS)
    assert any(line.split()[:1] == ["1.1"] and "fail" in line.split() for line in proc.stdout.splitlines())
    shutil.copyfile(ROOT / "solutions" / "ex01_attention.py", release / "exercises" / "ex01_attention.py")
    proc = minilin(*grade_command("1.1").split()[3:], cwd=release)  # the command each Classroom result names, now solved
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the student copy's own test command, whole, as its learner runs it after `pip install -e .` there (PYTHONPATH
    # stands for that install); its own basetemp, so that it cannot prune this run's temporary folders
    learner_env = {k: v for k, v in os.environ.items() if k != "MINILIN_REQUIRE_STUBS"}  # the course CI's flag
    learner_env["PYTHONPATH"] = str(release)
    tests = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-rfEs", "-p", "no:cacheprovider", "-n", "2",
                            "--basetemp", str(release.parent / "inner-pytest")],
                           cwd=release, capture_output=True, text=True, timeout=1500, env=learner_env)
    failed = [line for line in tests.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    failures = tests.stdout.split("= FAILURES =", 1)[-1][:6000] if "= FAILURES =" in tests.stdout else ""
    assert tests.returncode == 0, "\n".join(failed) + "\n" + failures + "\n" + tests.stdout[-3000:]
    # chapter 1 holds the learner's work, yet the stub side still runs (on stubs built pristine): no XPASS, no skip
    xfailed = int(next(w for w in tests.stdout.split(",") if "xfailed" in w).split()[0])
    assert xfailed >= len(TASKS) and "xpass" not in tests.stdout.lower(), tests.stdout[-3000:]
    assert not [line for line in tests.stdout.splitlines() if "holds your work" in line and "tests/exercises" in line]
