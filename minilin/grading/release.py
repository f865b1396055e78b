"""python -m minilin release OUTDIR: the course as students get it (and, with --gradescope, a Gradescope bundle).

The copy has the package, notebooks, tests, exercises/ and the committed results the notebooks read
(results/reference/), and no solutions/ and no .ci/: every task function in exercises/ is written back to its
stub (docstring + `raise NotImplementedError`), whatever the checkout holds. Its README is the student's (the
README's sections marked `<!-- student-copy: NAME -->`, with what the folder holds and how pushes are graded),
and notebook 00 drops its cells tagged `teacher-only`. `.github/workflows/classroom.yml` grades every push with
GitHub Classroom: one grading run for all tasks (`python -m minilin.grading.classroom`), whose per-task points
go to Classroom's grading reporter; `.github/classroom/rubric.toml` holds the points.

--gradescope FILE.zip writes a Gradescope autograder: setup.sh (Python 3.11, CPU PyTorch, the `grade` extra),
run_autograder (grades a copy of /autograder/submission, writes /autograder/results/results.json), the
package's source and the rubric. A teacher's hidden checks (--hidden-tests DIR) are validated and never copied,
into neither the student copy nor the bundle.
"""
import argparse
import json
import re
import shutil
import stat
import zipfile
from pathlib import Path

from minilin import launch
from minilin.cli import Parser, UsageError
from minilin.grading.classroom import grade_command, step_id  # noqa: F401 (grade_command: re-exported for tests)
from minilin.grading.checks import CannotGrade
from minilin.grading.course import CHAPTERS, TASKS, load_hidden, task_key
from minilin.grading.honesty import stubify
from minilin.grading.rubric import Points, check_weights, default_points, fmt_points, load_rubric

ROOT = Path(__file__).resolve().parents[2]
# results/reference: the committed results notebooks read (06's GPU sweeps if any, 07's reference sweep)
SHIP = ("README.md", "LICENSE", "LICENSE.md", "LICENSE.txt", "pyproject.toml", "environment.yml", "conftest.py",
        ".gitignore", "results/reference", "minilin", "notebooks", "tests", "exercises")
SKIP = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis", ".DS_Store"}
WORKFLOW = ".github/workflows/classroom.yml"
RUBRIC = ".github/classroom/rubric.toml"
START_HERE = "notebooks/00_start_here.ipynb"
TEACHER_ONLY, STUDENT_ONLY = "teacher-only", "student-only"  # notebook cell tags
TORCH = "2.13.0"  # the PyTorch every stored notebook output and the course's CI use (.ci/run)
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYTHON = "3.11"  # the grader needs tomllib (3.11+)
GRADE_MINUTES = 15  # the grading step's limit: nine chapters at the grader's 60 s each, plus the start


def build_parser():
    p = Parser(prog="python -m minilin release", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outdir", nargs="?", help="a new or empty folder for the student copy (optional with "
                   "--gradescope)")
    p.add_argument("--hidden-tests", metavar="DIR", help="the teacher's extra checks: validated, not shipped "
                   "(grade with `grade --submissions ... --hidden-tests DIR`)")
    p.add_argument("--rubric", metavar="TOML", help="points per task for the Classroom workflow and the "
                   "Gradescope bundle (default 1 each)")
    p.add_argument("--repo-url", metavar="URL", help="the GitHub repository the copy will be published at "
                   "(https://github.com/OWNER/REPO): each notebook gets Open-in-Colab and Launch-Binder badges and a "
                   "first code cell that sets the course up on Colab only (minilin/launch.py)")
    p.add_argument("--branch", default="main", help="the branch the badges open with --repo-url (default: main)")
    p.add_argument("--gradescope", metavar="FILE.zip", help="also write a Gradescope autograder bundle (setup.sh, "
                   "run_autograder, the package, the rubric) to this zip file")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.outdir is None and args.gradescope is None:
        raise UsageError("give OUTDIR (a student copy), --gradescope FILE.zip (a Gradescope bundle), or both")
    out = Path(args.outdir) if args.outdir is not None else None
    if out is not None:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise UsageError(f"{out} is not empty: give a new or empty folder")
        if any(out.resolve().is_relative_to((ROOT / name).resolve()) for name in SHIP):
            raise UsageError(f"{out} is inside the course's {', '.join(SHIP[-5:])}: choose a folder outside them")
    if args.gradescope is not None:
        bundle = Path(args.gradescope)
        if bundle.suffix != ".zip" or bundle.is_dir() or not bundle.resolve().parent.is_dir():
            raise UsageError(f"--gradescope {bundle}: give a file name ending in .zip, in an existing folder")
        if bundle.resolve().is_relative_to((ROOT / "minilin").resolve()):
            raise UsageError(f"--gradescope {bundle}: is inside minilin/, which the bundle holds: write it elsewhere")
    if args.repo_url is not None:
        if out is None:
            raise UsageError("--repo-url adds badges to a student copy: give OUTDIR too")
        launch.parse_repo_url(args.repo_url)  # checked before any file is written
    hidden = load_hidden(args.hidden_tests) if args.hidden_tests else {}
    points = load_rubric(args.rubric) if args.rubric else default_points()
    if args.rubric:  # one weight per check, the teacher's hidden checks included: as `grade` will count them
        check_weights(points, check_counts(points.weights, hidden), f"--rubric {args.rubric}")
    full, (points, cut) = points, shipped_points(points, hidden, f"--rubric {args.rubric}")
    check_weights(points, check_counts(points.weights, {}), f"--rubric {args.rubric} (as shipped)")
    total = fmt_points(sum(points.values()))
    if out is not None:
        skip = {Path(args.hidden_tests).resolve()} if args.hidden_tests else set()
        files = write_release(out, skip, points)
        if args.repo_url is not None:
            badged = launch.add_launch(out, args.repo_url, args.branch)
            print(f"added Colab and Binder badges for {args.repo_url} (branch {args.branch}) and a Colab-only "
                  f"setup cell to {len(badged)} notebooks")
        print(f"wrote {out}/: {files} files, no solutions/, exercises/ as stubs, a student README, {WORKFLOW} "
              f"({len(TASKS)} tasks, {total} points)")
    if args.gradescope is not None:
        files = write_gradescope(Path(args.gradescope), points)
        print(f"wrote {args.gradescope}: a Gradescope autograder ({files} files: setup.sh, run_autograder, the "
              f"package, rubric.toml; {len(TASKS)} tasks, {total} points)")
    if cut and (out is not None or args.gradescope is not None):
        print(f"the shipped rubric weighs only the public checks of task{'s' if len(cut) > 1 else ''} "
              f"{', '.join(cut)} (its hidden checks are not shipped; `grade --hidden-tests` uses all "
              f"{sum(len(full.weights[t]) for t in cut)} weights)")
    if hidden:
        print(f"hidden checks for tasks {', '.join(sorted(hidden, key=task_key))} were not shipped; grade with "
              f"`python -m minilin grade --submissions DIR --out gradebook.csv --hidden-tests {args.hidden_tests}`")
    return 0


def shipped_points(points, hidden, source):
    """(points, cut): the rubric the student copy's Classroom workflow and the Gradescope bundle grade with. They
    run the public checks only (a teacher's hidden checks are never shipped), so a weight list that also weighs
    a task's hidden checks is cut to its public checks (`cut`: those tasks), never left to zero a class there;
    refused here when the public checks would weigh nothing."""
    weights, cut = {}, []
    for task_id, items in getattr(points, "weights", {}).items():
        try:
            public = len(TASKS[task_id].public_steps)
        except CannotGrade:
            public = len(items)
        if task_id in hidden and len(items) > public:
            items, cut = items[:public], cut + [task_id]
            if not any(items):
                raise UsageError(f"{source}: [weights] \"{task_id}\" gives task {task_id}'s {public} public checks "
                                 "weight 0, and the Classroom workflow and the Gradescope bundle run only the "
                                 f"public checks (hidden ones are never shipped): give one of its first {public} "
                                 "weights a value > 0")
        weights[task_id] = items
    return Points(dict(points), weights=weights), sorted(cut, key=task_key)


def check_counts(task_ids, hidden):
    """{task id: its number of checks, public and hidden} (a task that cannot be built here is left out)."""
    counts = {}
    for task_id in task_ids:
        try:
            counts[task_id] = len(TASKS[task_id].steps(hidden.get(task_id, ())))
        except CannotGrade:
            continue
    return counts


# --- the student copy --------------------------------------------------------------------------------
def write_release(out, skip, points):
    readme = student_readme((ROOT / "README.md").read_text(encoding="utf-8"), points)  # checked before writing
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for name in SHIP:
        source = ROOT / name
        if source.is_file():
            shutil.copyfile(source, out / name)
            count += 1
        elif source.is_dir():
            count += _copy_tree(source, out / name, skip)
    (out / "README.md").write_text(readme, encoding="utf-8")
    start_here = out / START_HERE
    start_here.write_text(student_notebook(start_here.read_text(encoding="utf-8")), encoding="utf-8")
    write_stubs(out / "exercises", out / "exercises")
    for name, text in ((WORKFLOW, classroom_workflow(points)), (RUBRIC, rubric_toml(points))):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text, encoding="utf-8")
    return count + 2


def write_stubs(source, out):
    """Every exNN_*.py of `source` written to `out` (the same folder or a new one) with each task function back
    to its stub (docstring + `raise NotImplementedError`), whatever `source` holds: the stubs as released. The
    course's tests take their stubs from here (tests/conftest.py), never from a learner's exercises/.
    Returns the files written."""
    source, out = Path(source), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(source.glob("ex[0-9][0-9]_*.py")):
        tasks_of = {f: t.id for chapter in CHAPTERS.values() if chapter.file == path.name
                    for t in chapter.tasks.values() for f in t.functions}
        (out / path.name).write_text(stubify(path.read_text(encoding="utf-8"), tasks_of), encoding="utf-8")
        written.append(out / path.name)
    return written


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


SECTION = re.compile(r"^<!-- student-copy: (\w+) -->\n(.*?)^<!-- /student-copy -->\n", re.S | re.M)
STUDENT_README = """{title}

{intro}

> **This is your copy of the course**, made for you by your teacher. It has everything the notebooks need
> (`notebooks/`, `exercises/`, `minilin/`, `tests/`, `results/reference/`), your exercise files as stubs to
> fill in, and a GitHub Actions workflow that grades every push you make (*How your work is graded* below).

{quickstart}
**Test everything** (optional), from the course folder with the environment active:

```bash
pytest --nbval -n auto --dist loadscope
```

This runs the package's tests, re-executes every notebook and compares it output by output (strict, on every
core: `-n auto`), and runs the exercise tests on stubs rebuilt from your exercise files in a temporary folder:
every stub must still fail, so your own work never turns them red (grade your work with
`python -m minilin grade`).

## What is in this folder

| folder | what is in it |
|---|---|
| `notebooks/` | the chapters, `00` to `10`: open them in order, starting with `00_start_here.ipynb` |
| `exercises/` | your work: one file of stubs per chapter that has exercises (`ex01_attention.py`, `ex02_lowrank.py`, ...) |
| `minilin/` | the package the chapters build; each task's checks are in `minilin/grading/exNN_*.py` |
| `tests/` | the course's tests; `tests/exercises/` runs each task's checks under pytest |
| `results/reference/` | committed reference results that notebooks 06 and 07 read |
| `.github/workflows/classroom.yml` | the grading of every push (below); `.github/classroom/rubric.toml` holds each task's points |

## How your work is graded

**On your machine**, from the course folder with the environment active:

```bash
python -m minilin grade                  # every chapter
python -m minilin grade --chapter 3      # one chapter
python -m minilin grade --task 3.2       # one task
```

It prints one line per task (`pass`, `fail`, `error`, `timeout`, `crash`) with how many of its checks pass
(`3/5`) and which failed, then each failure in a few lines: the call, what it was compared with and by how
much your result differs; a line per chapter counts its tasks and checks, and the score line your points. Each
check scores on its own (partial credit): a task whose checks pass 3 of 5 earns 3/5 of its points, and it
counts as passed only when all of them do. Your code runs in a separate process with a time limit, and a task
whose function calls `minilin`'s own version of it does not count.

**On every push.** Each `git push` to your repository starts the workflow `.github/workflows/classroom.yml`
on GitHub Actions. It installs the grader (PyTorch {torch} for the CPU and the `grade` extra of
`pyproject.toml`; the first run downloads them, later runs reuse a cache), grades every task of your
`exercises/` once, the same way `python -m minilin grade` does, and reports each task's points
({total} points in all, with partial credit: the share of the task's checks that pass). To see them, open your repository on GitHub and click the **Actions** tab, then the
latest *Autograding Tests* run: its *Grade every task* step prints your feedback (a table of tasks with the
checks each passed, then each failure), and its *Autograding Reporter* step lists every task with its points,
the checks that failed, and the total. The run is
marked failed until every task passes. Your teacher sees the same points in GitHub Classroom.

{reference}"""


def student_readme(text, points):
    """The student copy's README: the main README's sections marked for students, around what a student needs."""
    sections = {name: body.strip("\n") for name, body in SECTION.findall(text)}
    missing = {"intro", "quickstart", "reference"} - set(sections)
    if missing:
        raise UsageError(f"README.md has no <!-- student-copy: {sorted(missing)[0]} --> ... <!-- /student-copy --> "
                         f"section: the student copy's README is built from those sections")
    title = text.splitlines()[0]
    return STUDENT_README.format(title=title, torch=TORCH, total=fmt_points(sum(points.values())),
                                 **sections).rstrip("\n") + "\n"


def student_notebook(text):
    """Notebook 00 as a student gets it: cells tagged teacher-only dropped, the student-only tag removed."""
    notebook = json.loads(text)
    kept = []
    for cell in notebook["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if TEACHER_ONLY in tags:
            continue
        if STUDENT_ONLY in tags:
            cell["metadata"]["tags"] = [t for t in tags if t != STUDENT_ONLY]
            if not cell["metadata"]["tags"]:
                del cell["metadata"]["tags"]
        kept.append(cell)
    notebook["cells"] = kept
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def rubric_toml(points, reader="the Classroom workflow's grading step"):
    lines = [f"# Points per task, read by {reader} (written by `python -m minilin release`).",
             "# A task earns the share of its checks that pass (partial credit), weighted by [weights] if given.",
             "default = 0", "", "[points]"]
    lines += [f"\"{t}\" = {fmt_points(points[t])}" for t in sorted(TASKS, key=task_key)]
    if weights := getattr(points, "weights", {}):
        lines += ["", "[weights]"] + [f"\"{t}\" = [{', '.join(map(fmt_points, weights[t]))}]"
                                      for t in sorted(weights, key=task_key)]
    return "\n".join(lines) + "\n"


def classroom_workflow(points):
    """GitHub Classroom autograding: one grading run for every task, then the reporter with one runner per task."""
    q = json.dumps  # a JSON string is a valid YAML double-quoted scalar
    tasks = sorted(TASKS, key=task_key)
    lines = [
        "# GitHub Classroom autograding, written by `python -m minilin release`.",
        "# One grading run for every task: `python -m minilin.grading.classroom` grades exercises/ once (as",
        "# `python -m minilin grade` does on your machine) and writes one result per task (task-1-1, ...), which the",
        f"# reporter turns into points ({fmt_points(sum(points.values()))} in all, from {RUBRIC}), with partial",
        "# credit: each check of a task scores on its own, and a task's message names the checks that failed.",
        "name: Autograding Tests",
        "\"on\": [push, repository_dispatch, workflow_dispatch]",
        "permissions:", "  checks: write", "  actions: read", "  contents: read",
        "jobs:", "  run-autograding-tests:", "    runs-on: ubuntu-latest", "    timeout-minutes: 30",
        "    if: github.actor != 'github-classroom[bot]'", "    steps:",
        "      - name: Checkout code", "        uses: actions/checkout@v4",
        "      - name: Set up Python", "        uses: actions/setup-python@v5", "        with:",
        f"          python-version: {q(PYTHON)}",
        "          cache: pip  # the wheels below are downloaded once, then restored from the cache",
        "          cache-dependency-path: pyproject.toml",
        f"      - name: {q(f'Install the grader (CPU PyTorch {TORCH}, the grade extra)')}", "        run: |",
        f"          python -m pip install torch=={TORCH} --index-url {TORCH_CPU_INDEX}",
        "          python -m pip install -e \".[grade]\"",
        "      - name: Grade every task", "        id: grade", f"        timeout-minutes: {GRADE_MINUTES}",
        f"        run: {q(classroom_command())}",
        "      - name: Autograding Reporter", "        uses: classroom-resources/autograding-grading-reporter@v1",
        "        env:",
    ]
    lines += [f"          {step_id(t).upper()}_RESULTS: \"${{{{ steps.grade.outputs.{step_id(t)} }}}}\"" for t in tasks]
    lines += ["        with:", f"          runners: {','.join(step_id(t) for t in tasks)}", ""]
    return "\n".join(lines)


def classroom_command():
    return f"python -m minilin.grading.classroom --rubric {RUBRIC}"


# --- the Gradescope bundle ---------------------------------------------------------------------------
BUNDLE_SOURCE = ("README.md", "LICENSE", "pyproject.toml", "minilin")  # what `pip install .[grade]` builds from
SETUP_SH = f"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (Ubuntu; this zip is unpacked in
# /autograder/source). Written by `python -m minilin release --gradescope`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if apt-get install -y -qq python{PYTHON} python{PYTHON}-venv; then
  py=python{PYTHON}
else  # an image whose Ubuntu has no python{PYTHON} package: its own python3 must then be {PYTHON} or newer
  apt-get install -y -qq python3 python3-venv
  py=python3
fi
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "the grader needs Python >= 3.11")'
# bubblewrap: the grader's sandbox; where the container cannot use it, the grader says so and runs unsandboxed
apt-get install -y -qq bubblewrap || echo "bubblewrap is not available: submissions will run unsandboxed"
"$py" -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
# the CPU wheel of the PyTorch the course is tested with (the default wheel is the multi-GB CUDA build)
/autograder/venv/bin/python -m pip install --quiet torch=={TORCH} --index-url {TORCH_CPU_INDEX}
/autograder/venv/bin/python -m pip install --quiet "/autograder/source[grade]"
"""
RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission (written by `python -m minilin release --gradescope`): it grades a
# copy of /autograder/submission with minilin's grader and writes /autograder/results/results.json (one test
# per task, points from rubric.toml). AUTOGRADER_ROOT and AUTOGRADER_PYTHON replace /autograder and the
# Python that setup.sh installed, to try the bundle on another machine; arguments go on to `minilin grade`
# (e.g. --timeout 120 on a slow machine; Gradescope passes none).
set -uo pipefail
root="${AUTOGRADER_ROOT:-/autograder}"
python="${AUTOGRADER_PYTHON:-$root/venv/bin/python}"
results="$root/results/results.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$root/results"
rm -f "$results"
cp -R "$root/submission" "$work/submission"   # the student's files, as uploaded (loose files or a clone)
cd "$root/source"                              # this bundle's minilin, next to rubric.toml
"$python" -m minilin grade --folder "$work/submission" --rubric rubric.toml --gradescope-json "$results" "$@"
status=$?
if [ ! -s "$results" ]; then  # the grader stopped before writing: say so on Gradescope instead of a blank page
  printf '{"score": 0, "output": "The grader stopped (exit code %s) before writing results; the autograder output says why. Ask your teacher.", "visibility": "visible", "stdout_visibility": "hidden"}\\n' "$status" > "$results"
  echo "the grader exited with $status without writing $results" >&2
fi
exit 0
"""


def write_gradescope(path, points):
    """The Gradescope autograder zip: setup.sh and run_autograder (executable) at its root, the package, the rubric."""
    members = [("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER),
               ("rubric.toml", rubric_toml(points, "the Gradescope bundle's run_autograder"))]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for name, text in members:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (0o644 if name.endswith(".toml") else 0o755)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, text)
        count = len(members)
        for name in BUNDLE_SOURCE:
            source = ROOT / name
            files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
            for file in files:
                relative = file.relative_to(ROOT)
                if file.is_symlink() or file.suffix == ".pyc" or SKIP & set(relative.parts):
                    continue
                bundle.write(file, relative.as_posix())
                count += 1
    return count


if __name__ == "__main__":  # python -m minilin.grading.release: the same as python -m minilin release
    from minilin.__main__ import run
    run("release")
