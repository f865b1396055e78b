"""What the grader prints and writes: the learner's table, the gradebook CSVs, feedback Markdown, Gradescope's
results.json, rubrics.

Two audiences: the teacher's gradebook keeps every message in full; what a learner reads (feedback files,
Gradescope's output) says only that a teacher's hidden check failed (`learner_message`). Every CSV cell that a
spreadsheet would read as a formula is defused (`safe_cell`), and file names come from `file_names`.
"""
import csv
import json
import re
from collections import Counter
from pathlib import Path

from minilin.grading.course import CHAPTERS, TASKS, allowed_helpers_text, task_key
from minilin.grading.text import fence, md_inline, one_line, visible
from minilin.grading.rubric import (Points, check_weights, default_points, earned, fmt_points, rounded,  # noqa: F401
                                    load_rubric, task_points)

CSV_COLUMNS = ("student", "task", "points", "max_points", "checks_passed", "checks_total", "status", "message")
NOT_IMPLEMENTED = "not implemented yet"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run as a formula (OWASP)
GRADESCOPE_VISIBILITY = ("hidden", "after_due_date", "after_published", "visible")


# --- what a learner may read -----------------------------------------------------------------------
def learner_message(result):
    """The message a learner may read: a hidden check's call and inputs stay with the teacher."""
    if result.hidden:
        return f"a hidden check failed ({result.hidden})"
    return result.message


def teacher_message(result):
    """Everything, on one line, for the gradebook: why (if another task), the first failure's message, which
    checks failed (a partly passing task), the note."""
    message = " | ".join(line.strip() for line in result.message.splitlines())
    if result.hidden:
        message = f"hidden check {result.hidden}: {message}"
    checks = checks_text(result) if _partial(result) else ""
    return " | ".join(filter(None, (result.cause, message, checks, f"note: {result.note}" if result.note else "")))


def _partial(result):
    return result.status != "pass" and 0 < getattr(result, "checks_passed", 0)


def checks_text(result, *, learner=False, width=None):
    """'3 of 5 checks; failed: check 2 (attention(...)), 4 (...)' (`learner`: a hidden check's call is not
    named); '' for a result without checks. `width` cuts each call's name (the table's short form)."""
    total = getattr(result, "checks_total", 0)
    if not total:
        return ""
    text = f"{result.checks_passed} of {total} checks"
    failed = list(getattr(result, "failed", ()))
    if not failed or result.checks_passed == 0:
        return text
    names = []
    for i, (number, what, hidden) in enumerate(failed):
        if hidden:
            what = "hidden" if learner else f"hidden {hidden}: {what}"
        if width is not None:
            what = cut(what, width) if width else ""
        names.append(f"{'check ' if i == 0 else ''}{number}{f' ({what})' if what else ''}")
    return f"{text}; failed: {', '.join(names)}"


def cut(line, width):
    """`line` in at most `width` characters, cut at a word boundary and marked with ... when shortened."""
    if len(line) <= width:
        return line
    room = line[:width - 3]
    head = room.rsplit(" ", 1)[0] if " " in room[width // 3:] else room  # a long word alone: cut it
    return head.rstrip(" ,;:.-(") + "..."


def short(result, width=60, *, learner=False):
    """The table's one-line summary of a result (`learner`: what a learner may read)."""
    if result.status == "pass":
        return ""
    if result.cause:  # the reason is another task: say which, even if the line is longer
        return cut(result.cause, width + 30)
    if learner and result.hidden:
        return learner_message(result)
    lines = result.message.splitlines() or [""]
    if lines[0].startswith(NOT_IMPLEMENTED):
        return NOT_IMPLEMENTED
    line = lines[0]
    if result.status == "error" and " raised " in line:  # the exception, not the call
        line = line.split(" raised ", 1)[1]
    if result.status == "fail" and len(lines) > 1:  # a check's failure: the call, then what differs
        line = lines[1].strip()
        if line.startswith("compared with ") and ": " in line:
            line = line.split(": ", 1)[1]
    return cut(line, width)


def failed_numbers(result):
    """'failed checks 2, 4: ' for a partly passing result (the table's prefix), else ''."""
    if not _partial(result):
        return ""
    return f"failed check{'s' if len(result.failed) > 1 else ''} {', '.join(str(f[0]) for f in result.failed)}: "


def task_table(results):
    """Lines of the per-task table: task, function(s), status, checks passed, one-line summary (which checks
    failed, then the first failure)."""
    rows = [("task", "function", "status", "checks", "")]
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        checks = f"{result.checks_passed}/{result.checks_total}" if getattr(result, "checks_total", 0) else "-"
        rows.append((task_id, ", ".join(TASKS[task_id].functions), result.status, checks,
                     failed_numbers(result) + short(result)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:<{widths[3]}}  {r[4]}".rstrip()
            for r in rows]


def _missing_lines(results):
    """One line per missing chapter file (not one per task): 'ex01_attention.py (tasks 1.1-1.5): no ...'."""
    by_file = {}
    for task_id in sorted(results, key=task_key):
        if results[task_id].status == "missing":
            by_file.setdefault(CHAPTERS[TASKS[task_id].chapter].file, []).append(task_id)
    lines = []
    for file, ids in by_file.items():
        span = ids[0] if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"
        lines.append(f"{file} (task{'s' if len(ids) > 1 else ''} {span}): {results[ids[0]].message}")
    return lines


def notes(results):
    """The grader's notes on what it graded instead of the exact file names, each once."""
    return list(dict.fromkeys(r.note for r in results.values() if r.note))


def is_empty(results):
    """True when none of the submission's exercise files was found (nothing to grade)."""
    return bool(results) and all(r.status == "missing" for r in results.values())


def _grouped(result):
    """Stubs still raising are listed once, not one section each (unless another task is the reason)."""
    return result.message.startswith(NOT_IMPLEMENTED) and not result.cause


def failure_details(results):
    """For each failing task, its first failure in a few lines; stubs still raising and missing files are
    listed once."""
    lines = [""] + [f"note: {n}" for n in notes(results)] if notes(results) else []
    todo = []
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        if result.status in ("pass", "missing"):
            continue
        if _grouped(result):
            todo.append(task_id)
            continue
        lines += ["", f"Task {task_id} · {', '.join(TASKS[task_id].functions)} · {result.status}"]
        if _partial(result):
            lines.append(f"  {checks_text(result)}")
        if result.cause:
            lines.append(f"  {result.cause}")
        if result.hidden:
            lines.append(f"  (hidden check {result.hidden})")
        lines += ["  " + line for line in result.message.splitlines()[:12]]
    if todo:
        lines += ["", f"{NOT_IMPLEMENTED} (the stub still raises NotImplementedError): {', '.join(todo)}"]
    if missing := _missing_lines(results):
        lines += ["", "missing:", *("  " + line for line in missing)]
    return lines


def score_line(results, label, points=None):
    """'score: 17.5/29 points (60%), 14/29 tasks pass [exercises]': points with partial credit."""
    points = points or default_points()
    got, total = totals(results, points)
    done = sum(r.status == "pass" for r in results.values())
    return f"score: {fmt_points(got)}/{fmt_points(total)} points ({100.0 * got / total if total else 0:.0f}%), " \
           f"{done}/{len(results)} tasks pass [{label}]"


def chapter_lines(results):
    """One progress line per chapter graded: 'chapter 3: 4 of 6 tasks, 17 of 21 checks'."""
    lines = []
    for chapter in sorted({TASKS[t].chapter for t in results}):
        mine = [r for t, r in results.items() if TASKS[t].chapter == chapter]
        passed = sum(r.status == "pass" for r in mine)
        checks = sum(getattr(r, "checks_passed", 0) for r in mine), sum(getattr(r, "checks_total", 0) for r in mine)
        lines.append(f"chapter {chapter}: {passed} of {len(mine)} tasks, {checks[0]} of {checks[1]} checks")
    return lines


# --- safe spreadsheets and file names ---------------------------------------------------------------
def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def safe_cell(value):
    """A CSV cell a spreadsheet will not run: text starting with = + - @ tab or CR gets a leading ' (OWASP's
    advice for CSV injection); numbers (e.g. -1.5) are left as they are."""
    text = str(value)
    if text.startswith(FORMULA_START) and not _is_number(text):
        return "'" + text
    return text


def _write_csv(path, columns, rows):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writerow({c: safe_cell(c) for c in columns})
        count = 0
        for row in rows:
            writer.writerow({key: safe_cell(value) for key, value in row.items()})
            count += 1
    return count


def write_rows(path, columns, rows):
    """Any other CSV the grader writes (the similarity report): cells defused as in the gradebook. Row count."""
    return _write_csv(path, columns, rows)


def file_name(student):
    """A file or folder name from a student's folder name: letters, digits, . _ - only; no leading dot or
    formula character; never empty."""
    name = re.sub(r"[^\w.-]+", "_", student).strip("_")
    name = re.sub(r"_+", "_", name).lstrip(".=+-@_")[:80].rstrip("._") or "student"
    return name


def file_names(students):
    """{student: file name}, unique: a second student whose name sanitises to the same gets -2, -3..."""
    out, used = {}, set()
    for student in sorted(students):
        base = name = file_name(student)
        n = 1
        while name.lower() in used:  # case-insensitive file systems (macOS) too
            n += 1
            name = f"{base}-{n}"
        used.add(name.lower())
        out[student] = name
    return out


# --- the teacher's gradebooks ----------------------------------------------------------------------
def rows(student, results, points):
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        yield {"student": one_line(student), "task": task_id,
               "points": fmt_points(task_points(result, points, task_id)),
               "max_points": fmt_points(points[task_id]), "checks_passed": getattr(result, "checks_passed", 0),
               "checks_total": getattr(result, "checks_total", 0), "status": result.status,
               "message": teacher_message(result)[:600]}


def write_gradebook(path, graded, points):
    """One row per (student, task): student,task,points,max_points,checks_passed,checks_total,status,message.
    Returns the row count."""
    return _write_csv(path, CSV_COLUMNS, (row for student, results in graded.items()
                                          for row in rows(student, results, points)))


def wide_columns(graded):
    """student, one column per chapter graded (its exercise file's name without .py), total, max, failed_checks."""
    chapters = sorted({TASKS[t].chapter for results in graded.values() for t in results})
    return ("student", *(CHAPTERS[c].module for c in chapters), "total", "max", "failed_checks"), chapters


def failed_checks(results):
    """The wide CSV's last cell: each task that lost points and its failed checks, '1.4: 2, 5; 3.1: all 4'."""
    parts = []
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        if result.status == "pass" or not getattr(result, "checks_total", 0):
            continue
        numbers = ", ".join(str(f[0]) for f in result.failed) if _partial(result) else f"all {result.checks_total}"
        parts.append(f"{task_id}: {numbers}")
    return "; ".join(parts)


def write_wide(path, graded, points):
    """One row per student (an LMS import): student, each chapter's points (with partial credit), total, max,
    and which checks failed. Returns the row count."""
    columns, chapters = wide_columns(graded)

    def row(student, results):
        out = {"student": one_line(student)}
        for c in chapters:
            out[CHAPTERS[c].module] = fmt_points(sum(task_points(r, points, t) for t, r in results.items()
                                                     if TASKS[t].chapter == c))
        got, total = totals(results, points)
        return {**out, "total": fmt_points(got), "max": fmt_points(total), "failed_checks": failed_checks(results)}
    return _write_csv(path, columns, (row(student, results) for student, results in graded.items()))


def totals(results, points):
    got = sum(task_points(r, points, t) for t, r in results.items())
    return got, sum(points[t] for t in results)


def summary_line(student, results, points, width):
    got, total = totals(results, points)
    counts = Counter(r.status for r in results.values())
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{one_line(student):<{width}}  {fmt_points(got):>5}/{fmt_points(total)} points  ({parts})"


# --- what the learner reads ------------------------------------------------------------------------
def _how_graded(note):
    return ["", "## How this was graded", "",
            f"Each task's checks ran your code in a separate process ({note}); its outputs were compared with the "
            "course's reference implementation. Each check scores on its own: a task whose checks pass 3 of 4 "
            "earns 3/4 of its points (partial credit). Using the reference itself fails the task; the allowed "
            "helpers are:", "", "```text", allowed_helpers_text(), "```",
            "", "Grade yourself before you submit: `python -m minilin grade` in the course folder.", ""]


def feedback_markdown(student, results, points, note):
    """A learner's feedback file: points, a table, one section per failure (hidden checks say only that one
    failed; missing files and untouched stubs are listed once; an empty submission gets one short section)."""
    got, total = totals(results, points)
    passed = sum(r.status == "pass" for r in results.values())
    checks = sum(r.checks_passed for r in results.values()), sum(r.checks_total for r in results.values())
    lines = [f"# Feedback: {md_inline(student)}", "",
             f"**{fmt_points(got)} / {fmt_points(total)} points** ({passed} of {len(results)} tasks pass, "
             f"{checks[0]} of {checks[1]} checks)."]
    if is_empty(results):
        files = sorted({CHAPTERS[TASKS[t].chapter].file for t in results})
        hints = list(dict.fromkeys(r.message.split("; ", 1)[1] for r in results.values() if "; " in r.message))
        lines += ["", "## Nothing to grade", "",
                  f"None of the exercise files was found in your submission: expected {', '.join(files)}, in the "
                  "submitted folder itself or in its `exercises/` folder.", *([""] if hints else []),
                  *(f"- {md_inline(h)}" for h in hints)]
        return "\n".join(lines + _how_graded(note))
    if found := notes(results):
        lines += ["", "## Notes", "", *(f"- {md_inline(n)}" for n in found)]
    lines += ["", "| task | function | points | status | checks | summary |", "|---|---|---|---|---|---|"]
    for row in rows(student, results, points):
        result = results[row["task"]]
        summary = failed_numbers(result) + md_inline(short(result, learner=True))
        lines.append(f"| {row['task']} | {', '.join(TASKS[row['task']].functions)} | {row['points']}/"
                     f"{row['max_points']} | {row['status']} | {row['checks_passed']}/{row['checks_total']} | "
                     f"{summary} |")
    todo = []
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        if result.status in ("pass", "missing"):
            continue
        if _grouped(result) and not result.hidden:
            todo.append(task_id)
            continue
        lines += ["", f"## Task {task_id} · {TASKS[task_id].title} · {result.status}", ""]
        if _partial(result):
            lines += [checks_text(result, learner=True).replace("|", "\\|") + ".", ""]
        if result.cause:
            lines += [result.cause[0].upper() + result.cause[1:] + ".", ""]
        lines += fence([visible(line) for line in learner_message(result).splitlines()[:15]])
    if todo:
        lines += ["", f"## {NOT_IMPLEMENTED[0].upper() + NOT_IMPLEMENTED[1:]}", "",
                  f"The stub still raises NotImplementedError: tasks {', '.join(todo)}."]
    if missing := _missing_lines(results):
        lines += ["", "## Missing files", "", *(f"- {md_inline(line)}" for line in missing)]
    return "\n".join(lines + _how_graded(note))


def _test_output(result):
    parts = [checks_text(result, learner=True) if result.status != "pass" else "", result.cause,
             learner_message(result) if result.status != "pass" else "", result.note and f"note: {result.note}"]
    return "\n".join(p for p in parts if p)


def gradescope_results(results, points, *, note="", visibility="visible"):
    """One submission's Gradescope results.json as a dict: one test per task.

    Fields follow Gradescope's autograder specification: top-level `score`, `output`, `visibility`,
    `stdout_visibility`, `tests`; each test `name`, `number`, `score`, `max_score`, `status` ("passed" or
    "failed"), `output`, `visibility`. A test decided by a teacher's hidden check says only that one failed and
    is shown after the grades are published; the grader's own output (stdout) is for the teacher only.
    """
    tests = []
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        tests.append({"name": f"Task {task_id} · {', '.join(TASKS[task_id].functions)}: {TASKS[task_id].title}",
                      "number": task_id, "score": rounded(task_points(result, points, task_id)),
                      "max_score": points[task_id],
                      "status": "passed" if result.status == "pass" else "failed",
                      "output": _test_output(result),
                      "visibility": "after_published" if result.hidden else visibility})
    got, total = totals(results, points)
    passed = sum(r.status == "pass" for r in results.values())
    summary = [f"{fmt_points(got)} / {fmt_points(total)} points ({passed} of {len(results)} tasks pass; each "
               "check scores on its own)."]
    if is_empty(results):
        summary.append("Nothing to grade: none of the exercise files was found in the submission.")
    summary += [f"note: {n}" for n in notes(results)]
    if note:
        summary.append(f"The checks ran your code in a separate process ({note}).")
    return {"score": rounded(got), "output": "\n".join(summary), "visibility": visibility,
            "stdout_visibility": "hidden",
            "tests": tests}


def write_gradescope_json(path, results, points, note=""):
    Path(path).write_text(json.dumps(gradescope_results(results, points, note=note), indent=1,
                                     ensure_ascii=False) + "\n", encoding="utf-8")


def write_gradescope(folder, graded, points, note=""):
    """folder/<student>/results.json for every student (names from file_names). Returns {student: path}."""
    folder = Path(folder)
    folder.mkdir(exist_ok=True)
    paths = {}
    for student, name in file_names(graded).items():
        (folder / name).mkdir(exist_ok=True)
        paths[student] = folder / name / "results.json"
        write_gradescope_json(paths[student], graded[student], points, note)
    return paths


def write_feedback(folder, graded, points, note):
    """folder/<student>.md for every student (names from file_names). Returns {student: path}."""
    folder = Path(folder)
    folder.mkdir(exist_ok=True)
    paths = {}
    for student, name in file_names(graded).items():
        paths[student] = folder / f"{name}.md"
        paths[student].write_text(feedback_markdown(student, graded[student], points, note), encoding="utf-8")
    return paths
