"""Grade exercises without trusting them: per-task table for a learner, gradebook CSV for a teacher.

    python -m minilin grade                        # your exercises/, every chapter
    python -m minilin grade --chapter 4            # one chapter
    python -m minilin grade --task 4.3             # one task
    python -m minilin grade --submissions submissions/ --out gradebook.csv --feedback feedback/
    python -m minilin grade --submissions submissions/ --wide grades.csv --gradescope gradescope/
    python -m minilin grade --folder alice/ --gradescope-json results.json   # one submission, e.g. on Gradescope
    python -m minilin release ../minilin-students  # a student copy of the course (no solutions)

Your code runs in a separate process (inside bwrap where available) with a time limit per chapter and a memory
cap; the grader builds the inputs, computes the expected results from minilin, and compares. Every check of a
task runs and scores on its own (partial credit): a task with 5 checks that passes 3 earns 3/5 of its points and
is a fail; it passes when every one of its checks does. The table shows each task's checks passed (3/5) and
which failed, a line per chapter counts tasks and checks, and the score line shows points with partial credit.
Each check also runs on inputs drawn anew for this run (same shapes and tolerances) and counts only if both pass
(--fixed-inputs: the fixed ones only).
Exit code: 0 when every graded task passes, 1 otherwise, 2 for a usage error. The machinery lives in
minilin/grading/.
"""
import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from minilin.cli import Parser, UsageError, positive_float, positive_int, report_progress

ROOT = Path(__file__).resolve().parent.parent


def build_parser():
    from minilin.grading.course import CHAPTERS, WITHOUT_EXERCISES, allowed_helpers_text
    from minilin.grading.sandbox import MODES
    without = f"; chapters {', '.join(map(str, WITHOUT_EXERCISES))} have none" if WITHOUT_EXERCISES else ""
    epilog = (f"Exercises exist for chapters {', '.join(map(str, CHAPTERS))}{without}.\n"
              "A task fails if its function calls minilin's own implementation (the reference it is graded "
              "against).\n" + allowed_helpers_text() +
              "\nTeacher's gradebook: one row per (student, task), columns student,task,points,max_points,"
              "checks_passed,\nchecks_total,status,message; points are partial credit (the share of the task's "
              "checks that pass);\nstatus is pass, fail, error, timeout, crash or missing, and a partly passing "
              "task is a fail. --wide: one\nrow per student, columns student, one per chapter (ex01_attention, "
              "...), total, max, failed_checks\n(\"1.4: 2, 5; 3.1: all 4\"). --gradescope: <student>/results.json "
              "in Gradescope's format, one test per\ntask, scored with partial credit, its output naming the failed "
              "checks. Feedback files and Gradescope\noutput say only \"a hidden check failed (N of M)\" for a "
              "teacher's hidden check; the gradebook keeps the\nfull message. Cells that a spreadsheet would run "
              "as a formula start with '. A rubric (TOML) weights\ntasks, and optionally a task's checks (one "
              "weight per check, public checks then hidden ones):\n"
              "  default = 1\n  [points]\n  \"4\" = 2      # every task of chapter 4\n  \"4.3\" = 3    # one task\n"
              "  [weights]\n  \"1.4\" = [1, 1, 1, 2, 2]   # task 1.4's checks, in order")
    p = Parser(prog="python -m minilin grade", description=__doc__, epilog=epilog,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chapter", type=int, action="append", default=[], metavar="N",
                   help="grade only chapter N's tasks (repeatable)")
    p.add_argument("--task", action="append", default=[], metavar="N.M",
                   help="grade only task N.M, e.g. 1.4 (repeatable; adds to --chapter)")
    p.add_argument("--timeout", type=positive_float, default=60.0, metavar="S",
                   help="seconds each chapter may take, importing your file included (default 60)")
    p.add_argument("--memory", type=positive_float, default=4.0, metavar="GIB",
                   help="memory cap of the process running the code, in GiB (default 4)")
    p.add_argument("--sandbox", choices=MODES, default="auto",
                   help="auto: bwrap where it works, else a plain process (default); bwrap: require it; none")
    p.add_argument("--impl", choices=("exercises", "solutions"), default=None,
                   help="which folder of the course to grade (default exercises: your work; solutions: the "
                        "course's own check)")
    p.add_argument("--hidden-tests", metavar="DIR", help="a teacher's extra checks (*.py using "
                   "minilin.grading.checks.hidden_check), added to the course's")
    p.add_argument("--folder", metavar="DIR", help="grade this one submission (its exNN_*.py files, or its "
                   "exercises/) instead of the course's exercises/")
    p.add_argument("--gradescope-json", metavar="FILE", help="also write this grading as Gradescope's "
                   "results.json (e.g. /autograder/results/results.json); works with --rubric")
    p.add_argument("--fixed-inputs", action="store_true",
                   help="run each check on its fixed inputs only (by default a check also runs on inputs drawn anew "
                        "for every run, and counts as passed only if both pass: a table of memorised answers to "
                        "the fixed inputs cannot pass)")
    t = p.add_argument_group("grading a class")
    t.add_argument("--submissions", metavar="DIR", help="one folder per student, each with exNN_*.py files")
    t.add_argument("--out", metavar="CSV", help="the gradebook to write: one row per (student, task)")
    t.add_argument("--wide", metavar="CSV", help="a gradebook with one row per student (student, one column per "
                   "chapter, total, max), for an LMS such as Canvas or Moodle")
    t.add_argument("--gradescope", metavar="DIR", help="write DIR/<student>/results.json in Gradescope's format")
    t.add_argument("--feedback", metavar="DIR", help="write one Markdown file per student here")
    t.add_argument("--rubric", metavar="TOML", help="points per task (default 1 each)")
    t.add_argument("--similarity", metavar="CSV", help="also write the pairs of submissions (and of a submission "
                   "and solutions/, where the course has it) whose graded functions are near-copies after "
                   "normalisation (names, comments, formatting ignored); points are not changed")
    t.add_argument("--jobs", type=positive_int, default=None, metavar="J",
                   help=f"students graded in parallel (default: the number of CPUs, {os.cpu_count()})")
    return p


def course_folder(name):
    """exercises/ or solutions/ of the course: next to the minilin package, else in the current folder."""
    for base in (ROOT, Path.cwd()):
        if (base / name).is_dir():
            return base / name
    if name == "solutions":
        raise UsageError("no solutions/ folder: a student copy of the course has none; grade your exercises/ "
                         "(drop --impl)")
    raise UsageError(f"no {name}/ folder next to minilin or here: run from the course folder")


def folder_line(folder, given):
    """The first line of a learner's grading: which folder is graded, and, when it is the course's default one and
    the current folder is elsewhere, that it is not the current folder (a copy there is not what is graded)."""
    from minilin.grading.text import one_line
    here, where = Path.cwd().resolve(), folder.resolve()
    inside = here.is_relative_to(ROOT) and where.is_relative_to(ROOT)  # shown relative: no machine path in a notebook
    line = f"grading folder: {one_line(os.path.relpath(where, here) if inside else str(where))}/"
    if given:
        return line + " (--folder)"
    if where.parent == ROOT and not here.is_relative_to(ROOT):
        line += (f" (the course beside the minilin package this Python imports, not the current folder "
                 f"{one_line(str(Path.cwd()))}; --folder DIR grades another)")
    return line


def check_file(option, path):
    """A file to write: not a folder, in a folder that exists."""
    path = Path(path)
    if path.is_dir() or not path.resolve().parent.is_dir():
        raise UsageError(f"{option} {path}: give a file name in an existing folder")


def check_folder(option, path):
    """A folder to write into: a folder or a new name whose parent exists."""
    path = Path(path)
    if path.exists() and not path.is_dir() or not path.resolve().parent.is_dir():
        raise UsageError(f"{option} {path}: give a folder (its parent must exist)")


def check_teacher_args(args):
    """Every path checked before any grading starts."""
    if args.submissions is None:
        for name in ("out", "wide", "gradescope", "feedback", "jobs", "similarity"):
            if getattr(args, name) is not None:
                raise UsageError(f"--{name} is for grading a class: add --submissions DIR")
        if args.rubric is not None and args.gradescope_json is None:
            raise UsageError("--rubric is for grading a class (--submissions DIR) or for --gradescope-json")
        if args.folder is not None:
            if args.impl is not None:
                raise UsageError("--folder grades that folder; drop --impl")
            folder = Path(args.folder)
            if not folder.is_dir():
                raise UsageError(f"--folder {folder}: no such folder" if not folder.exists() else
                                 f"--folder {folder}: is a file; give the folder that holds the exNN_*.py files")
        if args.gradescope_json is not None:
            check_file("--gradescope-json", args.gradescope_json)
        return
    if args.impl is not None:
        raise UsageError("--impl grades the course's own folders; drop it when grading --submissions")
    if args.folder is not None:
        raise UsageError("--folder grades one submission; --submissions grades a class: give one of them")
    if args.gradescope_json is not None:
        raise UsageError("--gradescope-json writes one submission's results; for a class use --gradescope DIR")
    root = Path(args.submissions)
    if root.is_file():
        raise UsageError(f"--submissions {root}: is a file, not a folder; give the folder that holds one folder "
                         f"per student")
    if not root.is_dir():
        raise UsageError(f"--submissions {root}: no such folder")
    if not student_folders(root):
        raise UsageError(f"--submissions {root}: no student folders inside (expected DIR/<student>/exNN_*.py)")
    if all(getattr(args, name) is None for name in ("out", "wide", "gradescope", "feedback")):
        raise UsageError("--submissions needs --out gradebook.csv (or --wide CSV, --gradescope DIR, --feedback DIR)")
    for option, name in (("--out", "out"), ("--wide", "wide"), ("--similarity", "similarity")):
        if getattr(args, name) is not None:
            check_file(option, getattr(args, name))
    for option, name in (("--feedback", "feedback"), ("--gradescope", "gradescope")):
        if getattr(args, name) is not None:
            check_folder(option, getattr(args, name))
    written = [Path(p).resolve() for p in (args.out, args.wide, args.similarity) if p is not None]
    if len(set(written)) < len(written):
        raise UsageError("--out, --wide and --similarity name the same file: give a file each")


def student_folders(root):
    return sorted(p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def main(argv=None):
    args = build_parser().parse_args(argv)
    if os.name == "nt":
        raise UsageError("the grader needs Linux or macOS (on Windows, use WSL)")
    from minilin.grading import report, runner, sandbox
    from minilin.grading.course import load_hidden, select
    tasks = select(args.chapter, args.task)
    check_teacher_args(args)
    folder = None
    if args.submissions is None:
        folder = Path(args.folder) if args.folder else course_folder(args.impl or "exercises")
        print(folder_line(folder, args.folder is not None), flush=True)
    points = report.load_rubric(args.rubric) if args.rubric else None
    hidden = load_hidden(args.hidden_tests) if args.hidden_tests else {}
    mode, note = sandbox.choose(args.sandbox)
    if mode is None:
        raise UsageError(f"--sandbox bwrap: {note}")
    hide = [p for p in (ROOT / "solutions", args.submissions, args.hidden_tests) if p]
    limits = runner.Limits(timeout=args.timeout, memory=int(args.memory * 2**30))
    print(f"{note}; {args.timeout:g} s per chapter, {sandbox.memory_note(limits.memory)}", flush=True)
    with runner.Session(tasks, limits=limits, mode=mode, hidden=hidden, hide=hide,
                        fresh=not args.fixed_inputs) as session:
        print(session.fresh_note(), flush=True)
        if points is not None:  # a weight list per check: checked once the checks (hidden ones too) are built
            report.check_weights(points, {t: len(steps) for t, steps in session.steps.items()},
                                 f"--rubric {args.rubric}")
        if args.submissions is None:
            return grade_one(session, folder, args, points or report.default_points(), note, report)
        return grade_class(session, args, points or report.default_points(), note, report)


def grade_one(session, folder, args, points, note, report):
    from minilin.grading.course import CHAPTERS, WITHOUT_EXERCISES
    results = session.grade(folder)
    chapters = sorted({int(t.split(".")[0]) for t in results})
    print(f"grading {report.one_line(folder.name)}/ ({', '.join(CHAPTERS[c].file for c in chapters)})")
    print("\n".join(report.task_table(results)))
    if details := report.failure_details(results):
        print("\n".join(details))
    if not args.chapter and not args.task and WITHOUT_EXERCISES:
        print(f"\nchapters {', '.join(map(str, WITHOUT_EXERCISES))} have no exercises")
    print("\n" + "\n".join(report.chapter_lines(results)))
    print(report.score_line(results, report.one_line(folder.name), points))
    if args.gradescope_json:
        report.write_gradescope_json(args.gradescope_json, results, points, note)
        got, total = report.totals(results, points)
        print(f"Gradescope results: {args.gradescope_json} ({report.fmt_points(got)}/{report.fmt_points(total)} "
              "points)")
    return 0 if all(r.status == "pass" for r in results.values()) else 1


def grade_class(session, args, points, note, report):
    from tqdm.auto import tqdm

    from minilin.grading.runner import Result
    students = student_folders(args.submissions)
    graded = {}
    disable = True if os.environ.get("TQDM_DISABLE") else None  # None: no bar when stderr is not a terminal
    with ThreadPoolExecutor(max_workers=args.jobs or os.cpu_count() or 1) as pool, \
            tqdm(total=len(students), desc="grading", unit="student", disable=disable, file=sys.stderr) as bar:
        futures = {pool.submit(session.grade, s): s.name for s in students}
        try:
            for future in as_completed(futures):
                graded[futures[future]] = student_results(future, futures[future], session, Result)
                bar.update(1)
                report_progress(where=f"after {len(graded)} of {len(students)} students")
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)  # students already started finish (their limits hold)
            raise
    graded = {name: graded[name] for name in sorted(graded)}
    written = []
    if args.out:
        written.append(f"gradebook: {args.out} ({report.write_gradebook(args.out, graded, points)} rows, "
                       f"{len(graded)} students)")
    if args.wide:
        written.append(f"one row per student: {args.wide} ({report.write_wide(args.wide, graded, points)} rows)")
    names = report.file_names(graded)
    if args.feedback:
        report.write_feedback(args.feedback, graded, points, note)
        written.append(f"feedback: {args.feedback}/<student>.md")
    if args.gradescope:
        report.write_gradescope(args.gradescope, graded, points, note)
        written.append(f"Gradescope: {args.gradescope}/<student>/results.json")
    if args.similarity:
        written.append(write_similarity(args.similarity, students, session.tasks, report))
    width = max(len(report.one_line(n)) for n in graded)
    for name, results in graded.items():
        print(report.summary_line(name, results, points, width))
    if args.feedback or args.gradescope:
        for name, safe in names.items():
            if safe != name:
                print(f"files of {name!r} are named {safe}")
    print("; ".join(written))
    return 0


def write_similarity(path, students, tasks, report):
    """The similarity report (minilin/grading/similarity.py): flagged pairs, one row each. Returns its summary."""
    from minilin.grading import similarity
    reference = ROOT / "solutions" if (ROOT / "solutions").is_dir() else None
    rows, compared = similarity.compare({s.name: s for s in students}, tasks, reference)
    rows = [{**row, "first": report.one_line(row["first"]), "second": report.one_line(row["second"])} for row in rows]
    report.write_rows(path, similarity.COLUMNS, rows)
    against = "each other and solutions/" if reference else "each other (no solutions/ here)"
    return f"similarity: {path} ({len(rows)} of {compared} pairs of functions flagged, compared with {against})"


def student_results(future, name, session, Result):
    from minilin.grading.text import one_line
    try:
        return future.result()
    except Exception as err:  # a grader bug on one odd submission must not lose the whole class
        print(f"warning: grading {one_line(name)} failed: {type(err).__name__}: {one_line(err)}", file=sys.stderr)
        return {t.id: Result(t.id, "crash", "the grader failed on this submission: "
                                            f"{type(err).__name__}: {one_line(err)}")
                for t in session.tasks}


if __name__ == "__main__":  # python -m minilin.grade: the same as python -m minilin grade
    from minilin.__main__ import run
    run("grade")
