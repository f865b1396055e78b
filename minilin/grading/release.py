"""python -m minilin release OUTDIR: the course as students get it.

The copy has the package, notebooks, tests, README and exercises/, and no solutions/: every task function in
exercises/ is written back to its stub (docstring + `raise NotImplementedError`), whatever the checkout holds.
Its exercise tests grade the student's own files (stubs are expected to fail, edited ones are skipped in the
plain `pytest` run and graded by `python -m minilin grade`), and `.github/workflows/classroom.yml` runs the
grader on every push with GitHub Classroom's autograding actions, one step (and its points) per task.
A teacher's hidden checks (--hidden-tests DIR) are validated and never copied.
"""
import argparse
import json
import shutil
from pathlib import Path

from minilin.cli import Parser, UsageError
from minilin.grading.course import CHAPTERS, TASKS, load_hidden, task_key
from minilin.grading.honesty import stubify
from minilin.grading.report import default_points, fmt_points, load_rubric

ROOT = Path(__file__).resolve().parents[2]
# results/reference: the committed results notebooks read (07's reference sweep), so every notebook runs there
SHIP = ("README.md", "LICENSE", "LICENSE.md", "LICENSE.txt", "pyproject.toml", "environment.yml", "conftest.py",
        ".gitignore", "results/reference", "minilin", "notebooks", "tests", "exercises")
SKIP = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis", ".DS_Store"}
WORKFLOW = ".github/workflows/classroom.yml"
STEP_MINUTES = 10  # the command grader's timeout per step, in minutes
NOTE = ("> **Student copy** (written by minilin's release command): there is no `solutions/` folder. Grade your "
        "work with\n> `python -m minilin grade`; `pytest` checks that the stubs you have not started still fail and "
        "skips the\n> tasks you have started.\n\n")


def build_parser():
    p = Parser(prog="python -m minilin release", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outdir", help="a new or empty folder for the student copy")
    p.add_argument("--hidden-tests", metavar="DIR", help="the teacher's extra checks: validated, not shipped "
                   "(grade with `grade --submissions ... --hidden-tests DIR`)")
    p.add_argument("--rubric", metavar="TOML", help="points per task for the classroom workflow (default 1 each)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    out = Path(args.outdir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} is not empty: give a new or empty folder")
    if any(out.resolve().is_relative_to((ROOT / name).resolve()) for name in SHIP):
        raise UsageError(f"{out} is inside the course's {', '.join(SHIP[-4:])}: choose a folder outside them")
    hidden = load_hidden(args.hidden_tests) if args.hidden_tests else {}
    points = load_rubric(args.rubric) if args.rubric else default_points()
    skip = {Path(args.hidden_tests).resolve()} if args.hidden_tests else set()
    files = write_release(out, skip, points)
    print(f"wrote {out}/: {files} files, no solutions/, exercises/ as stubs, {WORKFLOW} "
          f"({len(TASKS)} tasks, {fmt_points(sum(points.values()))} points)")
    if hidden:
        print(f"hidden checks for tasks {', '.join(sorted(hidden, key=task_key))} were not shipped; grade with "
              f"`python -m minilin grade --submissions DIR --out gradebook.csv --hidden-tests {args.hidden_tests}`")
    return 0


def write_release(out, skip, points):
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for name in SHIP:
        source = ROOT / name
        if source.is_file():
            shutil.copyfile(source, out / name)
            count += 1
        elif source.is_dir():
            count += _copy_tree(source, out / name, skip)
    readme = out / "README.md"
    if readme.is_file():
        readme.write_text(NOTE + readme.read_text(encoding="utf-8"), encoding="utf-8")
    stubs = {}
    for chapter in CHAPTERS.values():
        stubs.update({f: (chapter.file, t.id) for t in chapter.tasks.values() for f in t.functions})
    for path in sorted((out / "exercises").glob("ex[0-9][0-9]_*.py")):
        tasks_of = {f: task for f, (file, task) in stubs.items() if file == path.name}
        path.write_text(stubify(path.read_text(encoding="utf-8"), tasks_of), encoding="utf-8")
    workflow = out / WORKFLOW
    workflow.parent.mkdir(parents=True)
    workflow.write_text(classroom_workflow(points), encoding="utf-8")
    return count + 1


def _copy_tree(source, target, skip):
    count = 0
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        if path.name in SKIP or path.suffix == ".pyc" or path.is_symlink() or path.resolve() in skip:
            continue
        if path.is_dir():
            count += _copy_tree(path, target / path.name, skip)
        else:
            shutil.copyfile(path, target / path.name)
            count += 1
    return count


def step_id(task_id):
    return "task-" + task_id.replace(".", "-")


def classroom_workflow(points):
    """GitHub Classroom autograding: one command-grader step per task, then the reporter."""
    q = json.dumps  # a JSON string is a valid YAML double-quoted scalar
    tasks = sorted(TASKS, key=task_key)
    lines = [
        "# GitHub Classroom autograding, written by `python -m minilin release`.",
        "# One step per task: `python -m minilin grade --task N.M` exits 0 when the task passes, and the step",
        "# is then worth its max-score. The same command works on your machine, in the course folder.",
        "name: Autograding Tests",
        "\"on\": [push, repository_dispatch, workflow_dispatch]",
        "permissions:", "  checks: write", "  actions: read", "  contents: read",
        "jobs:", "  run-autograding-tests:", "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'", "    steps:",
        "      - name: Checkout code", "        uses: actions/checkout@v4",
        "      - name: Set up Python", "        uses: actions/setup-python@v5", "        with:",
        "          python-version: \"3.11\"",
        "      - name: Install the course", "        run: |",
        "          python -m pip install --upgrade pip",
        "          python -m pip install torch --index-url https://download.pytorch.org/whl/cpu",
        "          python -m pip install -e \".[course]\"",
    ]
    for task_id in tasks:
        name = f"Task {task_id} {', '.join(TASKS[task_id].functions)}"
        lines += [f"      - name: {q(name)}", f"        id: {step_id(task_id)}",
                  "        uses: classroom-resources/autograding-command-grader@v1", "        with:",
                  f"          test-name: {q(name)}", f"          command: {q(grade_command(task_id))}",
                  f"          timeout: {STEP_MINUTES}", f"          max-score: {fmt_points(points[task_id])}"]
    lines += ["      - name: Autograding Reporter", "        uses: classroom-resources/autograding-grading-reporter@v1",
              "        env:"]
    lines += [f"          {step_id(t).upper()}_RESULTS: \"${{{{steps.{step_id(t)}.outputs.result}}}}\"" for t in tasks]
    lines += ["        with:", f"          runners: {','.join(step_id(t) for t in tasks)}", ""]
    return "\n".join(lines)


def grade_command(task_id):
    return f"python -m minilin grade --task {task_id}"
