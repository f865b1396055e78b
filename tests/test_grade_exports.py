"""The teacher's exports and what learners read: safe spreadsheets, Gradescope and wide (LMS) gradebooks that
sum to the long gradebook, hidden checks that stay hidden, and submissions that are almost right.

A small class (chapter 1 and task 2.1) is graded once by the real command (module fixture); the rest are unit
tests of minilin.grading.report and minilin.grading.submission.
"""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minilin.cli import UsageError
from minilin.grade import main as grade
from minilin.grading import report, submission
from minilin.grading.course import CHAPTERS, TASKS
from minilin.grading.runner import Result

ROOT = Path(__file__).resolve().parent.parent
EVIL = '=HYPERLINK("http:evil","y")'  # "/" cannot be in a folder name: the formula is the same
EVIL_TWIN = '@HYPERLINK("http:evil","y")'  # sanitises to the same file name as EVIL
SECRET = "SECRET-EXPECTATION-4711"
HIDDEN_CHECKS = f'''
import torch
from minilin.grading.checks import equal, hidden_check

@hidden_check("1.5")
def bigger(saturated_rows):
    q = torch.ones(7, 3, 11, 4, dtype=torch.float64)  # equal scores: uniform rows, none saturated
    yield equal(saturated_rows(q, q), torch.zeros(7, 3, dtype=torch.float64))

@hidden_check("1.5")
def wrong_on_purpose(saturated_rows):
    q = torch.ones(5, 2, 13, 4, dtype=torch.float64)
    yield equal(saturated_rows(q, q), torch.ones(5, 2, dtype=torch.float64), what="{SECRET}")
'''
LONG = ("the mask builder gave up because the requested geometry is unsupported in this particular configuration "
        "of rows and columns")
RAISING_MASK = f"\ndef causal_mask(n, m, prefix=0):\n    raise RuntimeError({LONG!r})\n"
UNSCALED = ("\ndef scaled_scores(q, k):\n"
            "    return torch.einsum('bhnd,bhmd->bhnm', q, k.repeat_interleave(q.shape[1] // k.shape[1], 1))\n")
STUB_SCORES = "\ndef scaled_scores(q, k):\n    raise NotImplementedError('Task 1.1')\n"
EXIT_ON_SECRET = """
import os
_correct = saturated_rows
def saturated_rows(q, k, scale=None, threshold=0.99):
    if q.shape[0] == 5:  # only the hidden check's input
        os._exit(3)
    return _correct(q, k, scale, threshold)
"""
GRADED = ["--chapter", "1", "--task", "2.1"]


def solution(chapter):
    return (ROOT / "solutions" / CHAPTERS[chapter].file).read_text(encoding="utf-8")


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("exports")
    klass, hidden = base / "class", base / "hidden"
    hidden.mkdir()
    (hidden / "secret.py").write_text(HIDDEN_CHECKS)
    s1, s2 = solution(1), solution(2)
    students = {
        EVIL: {"ex01_attention.py": s1, "ex02_lowrank.py": s2},
        EVIL_TWIN: {"ex01_attention.py": s1},
        "cara": {"ex01_attention.py": s1 + RAISING_MASK},  # 1.4 fails inside her causal_mask
        "pat": {"ex01_attention.py": s1 + UNSCALED, "ex02_lowrank.py": s2},  # 1.4 uses her wrong scaled_scores
        "stu": {"ex01_attention.py": s1 + STUB_SCORES},  # 1.4 calls her stub
        "hank": {"ex01_attention.py": s1 + EXIT_ON_SECRET},  # his worker dies in a hidden check
        "emma": {"README.md": "I ran out of time"},  # nothing to grade
        "mona": {"ex1_attention.py": s1},  # misnamed
        "nick": {"minilin-nick/exercises/ex01_attention.py": s1, "minilin-nick/README.md": "a clone"},  # nested
        "abby": {"ex1_attention.py": s1, "Ex01_Attention.txt": s1},  # two candidates: which one?
    }
    for name, files in students.items():
        for file, text in files.items():
            (klass / name / file).parent.mkdir(parents=True, exist_ok=True)
            (klass / name / file).write_text(text, encoding="utf-8")
    rubric = base / "rubric.toml"
    rubric.write_text('default = 1\n[points]\n"1.4" = 3\n"2.1" = 2\n')
    out = {"long": base / "gradebook.csv", "wide": base / "wide.csv", "gradescope": base / "gradescope",
           "feedback": base / "feedback"}
    env = {**os.environ, "TQDM_DISABLE": "1"}
    proc = subprocess.run([sys.executable, "-m", "minilin", "grade", "--submissions", str(klass), *GRADED,
                           "--out", str(out["long"]), "--wide", str(out["wide"]), "--gradescope",
                           str(out["gradescope"]), "--feedback", str(out["feedback"]), "--rubric", str(rubric),
                           "--hidden-tests", str(hidden), "--timeout", "20", "--jobs", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = base / "pat.json"
    one = subprocess.run([sys.executable, "-m", "minilin", "grade", "--folder", str(klass / "pat"), *GRADED,
                          "--gradescope-json", str(single), "--rubric", str(rubric), "--hidden-tests", str(hidden),
                          "--timeout", "20"], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert one.returncode == 1 and single.is_file(), one.stdout[-2000:] + one.stderr[-2000:]
    rows = read_csv(out["long"])
    table = {}
    for row in rows[1:]:
        table.setdefault(row[0], {})[row[1]] = dict(zip(rows[0], row))
    names = report.file_names(students)
    return dict(proc=proc, out=out, rows=rows, table=table, names=names, students=students, single=single,
                points=report.load_rubric(rubric))


def feedback(exported, student):
    return (exported["out"]["feedback"] / f"{exported['names'][student]}.md").read_text(encoding="utf-8")


def gradescope(exported, student):
    return json.loads((exported["out"]["gradescope"] / exported["names"][student] / "results.json").read_text())


# --- item: safe gradebooks ---------------------------------------------------------------------------------
def test_safe_cell_defuses_formulas_but_keeps_numbers():
    for text in ("=1+1", "+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx", EVIL):
        assert report.safe_cell(text) == "'" + text
    for text in ("-1.5", "+3", "-0", "1e3", "alice", "", "score_matrix_bytes(1, 1, 16, float32)"):
        assert report.safe_cell(text) == text


@pytest.mark.needs_solutions
def test_no_gradebook_cell_starts_like_a_formula(exported, tmp_path):
    for path in (exported["out"]["long"], exported["out"]["wide"]):
        for row in read_csv(path):
            for cell in row:
                assert not cell.startswith(report.FORMULA_START) or report._is_number(cell), (path.name, cell)
    assert f"'{EVIL}" in exported["table"] and f"'{EVIL}" in {row[0] for row in read_csv(exported["out"]["wide"])}
    # a message that starts with "-" (e.g. a learner's exception text) is defused the same way
    path = tmp_path / "g.csv"
    report.write_gradebook(path, {"ann": {"1.1": Result("1.1", "error", "-1+cmd|' ! A1\nsecond line")}},
                           report.default_points())
    assert read_csv(path)[1][-1] == "'-1+cmd|' ! A1 | second line"


def test_file_names_are_safe_and_never_collide():
    names = report.file_names([EVIL, EVIL_TWIN, "../../etc/passwd", ".hidden", "José Núñez", "a/b", "a_b", "A_B",
                               "", "-"])
    assert len(set(n.lower() for n in names.values())) == len(names)
    for name in names.values():
        assert name and "/" not in name and "\\" not in name and not name.startswith((".", *report.FORMULA_START))
    assert names["José Núñez"] == "José_Núñez" and names[EVIL] == "HYPERLINK_http_evil_y"
    assert names[EVIL_TWIN] == "HYPERLINK_http_evil_y-2"  # sorted: "=" < "@"


@pytest.mark.needs_solutions
def test_feedback_and_gradescope_files_are_named_safely(exported):
    files = sorted(p.name for p in exported["out"]["feedback"].iterdir())
    assert files == sorted(f"{n}.md" for n in exported["names"].values())
    assert feedback(exported, EVIL).startswith(f"# Feedback: {EVIL}")
    assert feedback(exported, EVIL_TWIN).startswith(f"# Feedback: {EVIL_TWIN}")  # not overwritten by its twin
    assert sorted(p.name for p in exported["out"]["gradescope"].iterdir()) == sorted(exported["names"].values())
    assert f"files of {EVIL!r} are named HYPERLINK_http_evil_y" in exported["proc"].stdout


# --- item: exports ----------------------------------------------------------------------------------------
TOP_LEVEL = {"score": (int, float), "execution_time": (int, float), "output": str, "output_format": str,
             "test_output_format": str, "test_name_format": str, "visibility": str, "stdout_visibility": str,
             "extra_data": dict, "tests": list, "leaderboard": list}  # Gradescope's results.json specification
PER_TEST = {"score": (int, float), "max_score": (int, float), "status": str, "name": str, "name_format": str,
            "number": str, "output": str, "output_format": str, "tags": list, "visibility": str, "extra_data": dict}


def check_gradescope_format(data):
    assert isinstance(data, dict) and set(data) <= set(TOP_LEVEL), set(data) - set(TOP_LEVEL)
    for key, value in data.items():
        assert isinstance(value, TOP_LEVEL[key]) and not isinstance(value, bool), key
    assert data["visibility"] in report.GRADESCOPE_VISIBILITY
    assert data["stdout_visibility"] in report.GRADESCOPE_VISIBILITY
    for test in data["tests"]:
        assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(test) <= set(PER_TEST), test
        for key, value in test.items():
            assert isinstance(value, PER_TEST[key]) and not isinstance(value, bool), (key, test)
        assert test["status"] in ("passed", "failed") and test["visibility"] in report.GRADESCOPE_VISIBILITY
        assert 0 <= test["score"] <= test["max_score"]
        assert (test["status"] == "passed") == (test["score"] == test["max_score"] > 0)


@pytest.mark.needs_solutions
def test_every_export_sums_to_the_gradebook(exported):
    table, points = exported["table"], exported["points"]
    wide = read_csv(exported["out"]["wide"])
    chapters = [CHAPTERS[1].module, CHAPTERS[2].module]
    assert wide[0] == ["student", *chapters, "total", "max", "failed_checks"]
    assert len(wide) - 1 == len(exported["students"]) == len(table)
    by_name = {row[0]: dict(zip(wide[0], row)) for row in wide[1:]}
    ids = sorted(table[f"'{EVIL}"])
    assert ids == sorted(t for t in TASKS if TASKS[t].chapter == 1) + ["2.1"]
    full = sum(points[t] for t in ids)
    for student in exported["students"]:
        cell = report.safe_cell(student)
        rows = table[cell]
        got = sum(float(r["points"]) for r in rows.values())
        assert sum(float(r["max_points"]) for r in rows.values()) == full
        line = by_name[cell]
        near = lambda x: pytest.approx(x, abs=1e-3)  # noqa: E731 (each CSV cell is rounded to 4 decimals)
        assert float(line["total"]) == near(got) and float(line["max"]) == full
        assert sum(float(line[c]) for c in chapters) == near(got)
        for c, module in zip((1, 2), chapters):
            assert float(line[module]) == near(sum(float(r["points"]) for t, r in rows.items()
                                                   if TASKS[t].chapter == c))
        lost = [t for t, r in rows.items() if r["status"] != "pass"]
        assert all(f"{t}: " in line["failed_checks"] for t in lost) and bool(lost) == bool(line["failed_checks"])
        data = gradescope(exported, student)
        check_gradescope_format(data)
        assert [t["number"] for t in data["tests"]] == ids  # one test per task
        assert data["score"] == near(got) and data["score"] == near(sum(t["score"] for t in data["tests"]))
        assert sum(t["max_score"] for t in data["tests"]) == full
        for test in data["tests"]:
            row = rows[test["number"]]
            assert (test["status"] == "passed") == (row["status"] == "pass")
            assert test["score"] == near(float(row["points"]))  # partial credit, as in the gradebook
            if row["status"] != "pass":
                assert test["output"].startswith(f"{row['checks_passed']} of {row['checks_total']} checks")
    assert float(by_name["pat"]["total"]) < float(by_name[f"'{EVIL}"]["total"])  # the sums are not all equal


@pytest.mark.needs_solutions
def test_one_folder_gradescope_json_matches_the_class_export(exported):
    single = json.loads(exported["single"].read_text())
    check_gradescope_format(single)
    assert single == gradescope(exported, "pat")
    assert single["stdout_visibility"] == "hidden"  # the grader's own output holds the hidden checks' messages


def test_gradescope_options_are_checked_before_grading(tmp_path):
    (tmp_path / "class" / "ann").mkdir(parents=True)
    (tmp_path / "file").write_text("")
    klass = str(tmp_path / "class")
    cases = {("--wide", "w.csv"): "--wide is for grading a class", ("--gradescope", "gs"): "--gradescope is for",
             ("--submissions", klass, "--gradescope", str(tmp_path / "file")): "give a folder",
             ("--submissions", klass, "--wide", str(tmp_path / "no" / "w.csv")): "existing folder",
             ("--submissions", klass, "--out", "g.csv", "--wide", "g.csv"): "same file",
             ("--submissions", klass, "--gradescope-json", "r.json"): "--gradescope DIR",
             ("--submissions", klass, "--folder", klass): "give one of them",
             ("--folder", str(tmp_path / "nope")): "no such folder",
             ("--folder", str(tmp_path / "file")): "is a file",
             ("--gradescope-json", str(tmp_path / "no" / "r.json")): "existing folder",
             ("--rubric", "r.toml"): "--gradescope-json"}
    for argv, words in cases.items():
        with pytest.raises(UsageError, match=words):
            grade(list(argv))


# --- item: hidden checks stay hidden ------------------------------------------------------------------------
@pytest.mark.needs_solutions
def test_hidden_checks_say_only_that_one_failed(exported):
    row = exported["table"]["pat"]["1.5"]
    assert row["status"] == "fail" and SECRET in row["message"] and "hidden check 2 of 2" in row["message"]
    assert "saturated_rows(<5x2x13x4" in row["message"]  # the teacher sees the call
    crash = exported["table"]["hank"]["1.5"]  # every check before the crash passed: a fail, with partial credit
    assert crash["status"] == "fail" and "code 3" in crash["message"] and "hidden check 2 of 2" in crash["message"]
    assert int(crash["checks_passed"]) == int(crash["checks_total"]) - 1
    assert "saturated_rows(<5x2x13x4" in crash["message"]
    for student in ("pat", EVIL, "hank"):
        text = feedback(exported, student)
        assert "a hidden check failed (2 of 2)" in text
        assert SECRET not in text and "5x2x13" not in text
        data = gradescope(exported, student)
        blob = json.dumps(data)
        assert SECRET not in blob and "5x2x13" not in blob
        test = next(t for t in data["tests"] if t["number"] == "1.5")
        assert test["output"].endswith("; failed: check 1 (hidden)\na hidden check failed (2 of 2)".replace(
            "check 1", f"check {len(TASKS['1.5'].steps()) + 2}")), test["output"]
        assert test["visibility"] == "after_published"
        assert all(t["visibility"] == "visible" for t in data["tests"] if t["number"] != "1.5")


def test_learner_message_hides_only_hidden_checks():
    public = Result("1.5", "fail", "score_matrix_bytes(1, 1, 16, torch.float32)\n  got 1, expected 1024")
    hidden = Result("1.5", "timeout", "no answer within 20 s while running score_matrix_bytes(5, 2, 13)",
                    hidden="1 of 3")
    assert report.learner_message(public) == public.message
    assert report.learner_message(hidden) == "a hidden check failed (1 of 3)"
    assert report.short(hidden, learner=True) == "a hidden check failed (1 of 3)"
    assert "(5, 2, 13)" in report.teacher_message(hidden) and "hidden check 1 of 3" in report.teacher_message(hidden)


# --- item: submissions that are almost right ------------------------------------------------------------------
def test_locate_finds_misnamed_files_and_asks_when_unsure(tmp_path):
    chapters = [CHAPTERS[1], CHAPTERS[2]]
    cases = {"ex1_attention.py": "graded ex1_attention.py", "Ex01_Attention.py": "graded Ex01_Attention.py",
             "ex01_attention.py.txt": "graded ex01_attention.py.txt", "ex01-attention.txt": "graded"}
    for i, (name, note) in enumerate(cases.items()):
        folder = tmp_path / f"s{i}"
        folder.mkdir()
        (folder / name).write_text("x = 1\n")
        found = submission.locate(folder, chapters)
        assert found.files == {"ex01_attention.py": folder / name}, name
        assert found.notes["ex01_attention.py"].startswith(note) and "ex02_lowrank.py" not in found.files
    exact = tmp_path / "exact"
    exact.mkdir()
    for name in ("ex01_attention.py", "ex1_attention.py"):
        (exact / name).write_text("x = 1\n")
    assert submission.locate(exact, chapters).notes == {}  # the right name wins, no note
    close = tmp_path / "close"
    close.mkdir()
    (close / "ex01_atention.py").write_text("x = 1\n")
    (close / "ex02_lowrank.ipynb").write_text("{}")
    found = submission.locate(close, chapters)
    assert found.files == {} and "did you mean ex01_atention.py?" in found.hints["ex01_attention.py"]
    assert "found ex02_lowrank.ipynb" in found.hints["ex02_lowrank.py"]
    deep = tmp_path / "deep"
    for repo in ("one", "two"):
        (deep / repo).mkdir(parents=True)
        (deep / repo / "ex01_attention.py").write_text("x = 1\n")
    assert "did you mean one/ or two/?" in submission.locate(deep, chapters).hints["ex01_attention.py"]


@pytest.mark.needs_solutions
def test_misnamed_and_nested_submissions_are_graded_with_a_note(exported):
    table = exported["table"]
    for student, words in (("mona", "graded ex1_attention.py as ex01_attention.py"),
                           ("nick", "graded minilin-nick/exercises/: the exercise files were one folder deeper")):
        assert all(table[student][t]["status"] == "pass" for t in table[student] if t != "1.5" and t != "2.1")
        assert all(words in table[student][t]["message"] for t in table[student] if t.startswith("1.")), student
        assert words in feedback(exported, student)
    assert all(r["status"] == "missing" and "did you mean Ex01_Attention.txt or ex1_attention.py" in r["message"]
               for t, r in table["abby"].items() if t.startswith("1."))


@pytest.mark.needs_solutions
def test_a_task_that_calls_a_failing_task_says_so(exported):
    table = exported["table"]
    assert table["cara"]["1.4"]["message"].startswith(
        "fails because it calls your causal_mask (Task 1.3), which fails")  # the traceback passes through it
    assert table["pat"]["1.4"]["message"].startswith(
        "probably fails because it calls your scaled_scores (Task 1.1), which fails")  # found in the source only
    assert table["stu"]["1.4"]["message"].startswith(
        "fails because it calls your scaled_scores (Task 1.1), which is not implemented yet")
    assert table["cara"]["1.1"]["message"] == table["cara"]["1.2"]["message"] == ""  # passing tasks: no cause
    assert "Fails because it calls your causal_mask (Task 1.3), which fails." in feedback(exported, "cara")


def test_summaries_end_at_a_word():
    result = Result("1.3", "error", f"running causal_mask(4, 4) raised RuntimeError: {LONG}")
    summary = report.short(result)
    assert summary.endswith("...") and len(summary) <= 60
    line, head = f"RuntimeError: {LONG}", summary[:-3]
    assert line.startswith(head) and line[len(head)] == " ", summary  # cut where a word ends
    assert report.cut("a" * 100, 20) == "a" * 17 + "..."  # one long word: cut it anyway
    assert report.cut("short enough", 60) == "short enough"


@pytest.mark.needs_solutions
def test_feedback_summaries_in_the_class_end_at_a_word(exported):
    text = feedback(exported, "cara")
    row = next(line for line in text.splitlines() if line.startswith("| 1.3 |"))
    summary = row.split("|")[-2].strip()
    line = f"RuntimeError: {LONG}"
    assert summary.endswith("...") and line.startswith(summary[:-3]) and line[len(summary) - 3] == " ", summary


@pytest.mark.needs_solutions
def test_an_empty_submission_gets_one_short_section(exported):
    text = feedback(exported, "emma")
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == ["## Nothing to grade", "## How this was graded"]
    assert "expected ex01_attention.py, ex02_lowrank.py" in text and "| task |" not in text
    assert "Nothing to grade" in gradescope(exported, "emma")["output"]
    missing = report.failure_details({t: Result(t, "missing", "no ex01_attention.py in emma/")
                                      for t in TASKS if t.startswith("1.")})
    last = max((t for t in TASKS if t.startswith("1.")), key=lambda t: int(t.split(".")[1]))
    assert missing == ["", "missing:", f"  ex01_attention.py (tasks 1.1-{last}): no ex01_attention.py in emma/"]


def test_partial_credit_is_shown_everywhere_a_learner_looks():
    """Which checks failed: the table, the details, the feedback, Gradescope, the wide CSV's cell, the score."""
    ids = sorted(t for t in TASKS if TASKS[t].chapter == 1)
    partial = Result("1.4", "fail", "attention(<2x2x5x4 float64>, ..., causal=True)\n  compared with x: 3 of 9 "
                     "entries differ", checks=(True, False, True, False, True),
                     failed=((2, "attention(..., causal=True)", ""), (4, "attention(..., causal=True)", "1 of 1")))
    results = {t: Result(t, "pass", checks=(True, True)) for t in ids}
    results["1.4"] = partial
    results[ids[-1]] = Result(ids[-1], "missing", "no ex01_attention.py", checks=(False, False))
    text = report.checks_text(partial)
    assert text == "3 of 5 checks; failed: check 2 (attention(..., causal=True)), 4 (hidden 1 of 1: attention(..., " \
                   "causal=True))"
    assert report.checks_text(partial, learner=True).endswith("4 (hidden)")
    row = next(line for line in report.task_table(results) if line.startswith("1.4 "))
    assert "3/5" in row and "failed checks 2, 4: 3 of 9 entries differ" in row
    assert "  " + text in report.failure_details(results)
    points = report.default_points()
    assert report.rows("ann", {"1.4": partial}, points).__next__()["points"] == "0.6"
    assert report.failed_checks(results) == f"1.4: 2, 4; {ids[-1]}: all 2"
    n = len(ids)
    assert report.chapter_lines(results) == [f"chapter 1: {n - 2} of {n} tasks, {2 * (n - 2) + 3} of {2 * n + 3} "
                                             "checks"]
    assert report.score_line(results, "x", points) == f"score: {n - 2 + 0.6:g}/{n} points " \
        f"({100 * (n - 1.4) / n:.0f}%), {n - 2}/{n} tasks pass [x]"
    feedback_text = report.feedback_markdown("ann", results, points, "no sandbox")
    assert "| 1.4 | attention | 0.6/1 | fail | 3/5 | failed checks 2, 4: 3 of 9 entries differ |" in feedback_text
    assert "3 of 5 checks; failed: check 2 (attention(..., causal=True)), 4 (hidden)." in feedback_text
    assert "partial credit" in feedback_text
    test = next(t for t in report.gradescope_results(results, points)["tests"] if t["number"] == "1.4")
    assert test["score"] == pytest.approx(0.6) and test["status"] == "failed"
    assert test["output"].startswith("3 of 5 checks; failed: check 2") and "hidden 1 of 1" not in test["output"]
