"""python -m minilin.grading.classroom: grade this course folder's exercises/ once, for GitHub Classroom.

The workflow that `python -m minilin release` writes (.github/workflows/classroom.yml) runs this as its one
grading step: every task is graded in a single run of the grader (one `import torch`, one child process per
chapter), exactly as `python -m minilin grade --submissions` grades a class of one, so the points are the
gradebook's: partial credit, each check of a task scoring on its own (a task passing 3 of its 4 checks gets 3/4
of its points, and its message names the checks that failed). It prints the feedback file a teacher would hand out, then appends one line per task to
$GITHUB_OUTPUT (or --output FILE):

    task-1-1=<base64 of the JSON result of GitHub Classroom's command grader for task 1.1>

The JSON is {"version": 1, "status", "max_score", "tests": [{"name", "status", "score", "message", ...}]}, what
classroom-resources/autograding-grading-reporter reads from the environment variable TASK-1-1_RESULTS. Exit
code 0 when every task was graded (passing or not: the reporter shows each task's points), 2 for a usage error.
"""
import argparse
import base64
import contextlib
import csv
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from minilin.cli import Parser, UsageError, positive_float
from minilin.grading.course import CHAPTERS, TASKS, task_key

PROG = "python -m minilin.grading.classroom"
# the grader's statuses -> the three the reporter knows (it prints each test's message unless it passed)
REPORTER_STATUS = {"pass": "pass", "fail": "fail", "missing": "fail", "error": "error", "timeout": "error",
                   "crash": "error"}


def build_parser():
    p = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rubric", metavar="TOML", help="points per task (default 1 each); the release writes "
                   ".github/classroom/rubric.toml")
    p.add_argument("--output", metavar="FILE", help="where to append the per-task results (default: "
                   "$GITHUB_OUTPUT, set by GitHub Actions)")
    p.add_argument("--timeout", type=positive_float, default=60.0, metavar="S",
                   help="seconds each chapter may take (default 60, as for `python -m minilin grade`)")
    p.add_argument("--memory", type=positive_float, default=4.0, metavar="GIB",
                   help="memory cap of the process running the code, in GiB (default 4)")
    return p


def step_id(task_id):
    """The reporter's runner id of a task: 1.4 -> task-1-4 (its results variable is TASK-1-4_RESULTS)."""
    return "task-" + task_id.replace(".", "-")


def grade_command(task_id):
    """The command that grades one task on the student's machine (shown with each result)."""
    return f"python -m minilin grade --task {task_id}"


def test_name(task_id):
    return f"Task {task_id} {', '.join(TASKS[task_id].functions)}"


def main(argv=None):
    from minilin import grade
    args = build_parser().parse_args(argv)
    output = args.output or os.environ.get("GITHUB_OUTPUT")
    if not output:
        raise UsageError("no --output FILE and no GITHUB_OUTPUT (GitHub Actions sets it): say where to write")
    output = Path(output)
    if output.is_dir() or not output.resolve().parent.is_dir():
        raise UsageError(f"--output {output}: give a file name in an existing folder")
    exercises = grade.course_folder("exercises")
    name = os.environ.get("GITHUB_REPOSITORY", "").rpartition("/")[2] or exercises.resolve().parent.name
    name = name.lstrip("._") or "student"  # the grader skips folders named .x or _x
    with tempfile.TemporaryDirectory(prefix="minilin-classroom-") as tmp:
        tmp = Path(tmp)
        shutil.copytree(exercises, tmp / "submissions" / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        gradebook, feedback = tmp / "gradebook.csv", tmp / "feedback"
        options = ["--submissions", str(tmp / "submissions"), "--out", str(gradebook), "--feedback", str(feedback),
                   "--jobs", "1", "--timeout", f"{args.timeout:g}", "--memory", f"{args.memory:g}"]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            grade.main(options + (["--rubric", args.rubric] if args.rubric else []))
        # the grader's own lines, without the ones naming this command's temporary folder
        print("\n".join(line for line in printed.getvalue().splitlines() if str(tmp) not in line))
        rows = read_gradebook(gradebook)
        for path in sorted(feedback.glob("*.md")):
            print("\n" + path.read_text(encoding="utf-8"))
    results = reporter_results(rows)
    with output.open("a", encoding="utf-8") as handle:
        handle.writelines(f"{step}={payload}\n" for step, payload in results.items())
    print(f"{len(results)} task results written to {output} for the grading reporter")
    return 0


def read_gradebook(path):
    """The gradebook's rows of the one student graded, {task id: row}, every task present."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = {row["task"]: row for row in csv.DictReader(handle)}
    if set(rows) != set(TASKS):
        raise RuntimeError(f"the gradebook lacks tasks {sorted(set(TASKS) - set(rows), key=task_key)}")
    return rows


def reporter_results(rows):
    """{runner id: base64 JSON} in the command grader's result format, one per task, in task order."""
    results = {}
    for task_id in sorted(rows, key=task_key):
        row = rows[task_id]
        message = row["message"]
        if message[:1] == "'" and message[1:2] in ("=", "+", "-", "@", "\t", "\r"):
            message = message[1:]  # a spreadsheet's formula guard; the reporter prints plain text
        status = REPORTER_STATUS[row["status"]]
        if row.get("checks_total", "0") not in ("", "0") and row["status"] != "pass":  # partial credit, said first
            message = f"{row['checks_passed']} of {row['checks_total']} checks pass: {message}"
        result = {"version": 1, "status": status, "max_score": number(row["max_points"]),
                  "tests": [{"name": test_name(task_id), "status": status, "score": number(row["points"]),
                             "message": message or None, "test_code": grade_command(task_id),
                             "filename": f"exercises/{CHAPTERS[TASKS[task_id].chapter].file}"}]}
        results[step_id(task_id)] = base64.b64encode(json.dumps(result).encode()).decode("ascii")
    return results


def number(text):
    value = float(text)
    return int(value) if value.is_integer() else value


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        sys.exit(2)
