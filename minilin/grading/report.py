"""What the grader prints and writes: the learner's table, the gradebook CSV, feedback Markdown, rubrics."""
import csv
import math
import tomllib
from collections import Counter
from pathlib import Path

from minilin.cli import UsageError
from minilin.grading.course import CHAPTERS, TASKS, allowed_helpers_text, task_key

CSV_COLUMNS = ("student", "task", "points", "max_points", "status", "message")
NOT_IMPLEMENTED = "not implemented yet"


def short(result, width=60):
    """The table's one-line summary of a result."""
    if result.status == "pass":
        return ""
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
    return line if len(line) <= width else line[:width - 3] + "..."


def task_table(results):
    """Lines of the per-task table: task, function(s), status, one-line summary."""
    rows = [("task", "function", "status", "")]
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        rows.append((task_id, ", ".join(TASKS[task_id].functions), result.status, short(result)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows]


def failure_details(results):
    """For each failing task, its first failure in a few lines; stubs still raising are listed once."""
    lines, todo = [], []
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        if result.status == "pass":
            continue
        if result.message.startswith(NOT_IMPLEMENTED):
            todo.append(task_id)
            continue
        lines += ["", f"Task {task_id} · {', '.join(TASKS[task_id].functions)} · {result.status}"]
        lines += ["  " + line for line in result.message.splitlines()[:12]]
    if todo:
        lines += ["", f"{NOT_IMPLEMENTED} (the stub still raises NotImplementedError): {', '.join(todo)}"]
    return lines


def score_line(results, label):
    done = sum(r.status == "pass" for r in results.values())
    return f"score: {done}/{len(results)} tasks ({100.0 * done / max(1, len(results)):.0f}%) [{label}]"


# --- rubrics and points ----------------------------------------------------------------------------
def default_points():
    return {task_id: 1 for task_id in TASKS}


def load_rubric(path):
    """{task id: points} from a TOML rubric; every task not named gets `default` (1 when absent).

        default = 1
        [points]
        "4" = 2        # every task of chapter 4
        "4.3" = 3      # a task (wins over its chapter)
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--rubric {path}: no such file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"--rubric {path}: not valid TOML ({err})") from None
    unknown = set(data) - {"default", "points"}
    if unknown:
        raise UsageError(f"--rubric {path}: unknown keys {sorted(unknown)}; use `default` and a [points] table")
    default = _points(data.get("default", 1), path, "default")
    points = {task_id: default for task_id in TASKS}
    table = data.get("points", {})
    if not isinstance(table, dict):
        raise UsageError(f"--rubric {path}: [points] must be a table of \"N.M\" = points")
    for key in sorted(table, key=lambda k: ("." in k, k)):  # chapters first, then tasks override them
        value = _points(table[key], path, key)
        if key in TASKS:
            points[key] = value
        elif key.isdigit() and int(key) in CHAPTERS:
            points.update({t: value for t in TASKS if TASKS[t].chapter == int(key)})
        else:
            raise UsageError(f"--rubric {path}: {key!r} is neither a task (e.g. \"1.2\") nor a chapter with "
                             f"exercises ({', '.join(map(str, CHAPTERS))})")
    return points


def _points(value, path, key):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UsageError(f"--rubric {path}: points for {key!r} must be a number >= 0, got {value!r}")
    return value


def fmt_points(x):
    return f"{x:g}"


def rows(student, results, points):
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        earned = points[task_id] if result.status == "pass" else 0
        message = " | ".join(line.strip() for line in result.message.splitlines())
        yield {"student": student, "task": task_id, "points": fmt_points(earned),
               "max_points": fmt_points(points[task_id]), "status": result.status, "message": message[:600]}


def write_gradebook(path, graded, points):
    """One row per (student, task): student,task,points,max_points,status,message."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        count = 0
        for student, results in graded.items():
            for row in rows(student, results, points):
                writer.writerow(row)
                count += 1
    return count


def totals(results, points):
    earned = sum(points[t] for t, r in results.items() if r.status == "pass")
    return earned, sum(points[t] for t in results)


def summary_line(student, results, points, width):
    earned, total = totals(results, points)
    counts = Counter(r.status for r in results.values())
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{student:<{width}}  {fmt_points(earned):>5}/{fmt_points(total)} points  ({parts})"


def feedback_markdown(student, results, points, note):
    earned, total = totals(results, points)
    passed = sum(r.status == "pass" for r in results.values())
    lines = [f"# Feedback: {student}", "",
             f"**{fmt_points(earned)} / {fmt_points(total)} points** ({passed} of {len(results)} tasks pass).", "",
             "| task | function | points | status | summary |", "|---|---|---|---|---|"]
    for row in rows(student, results, points):
        summary = short(results[row["task"]]).replace("|", "\\|")
        lines.append(f"| {row['task']} | {', '.join(TASKS[row['task']].functions)} | {row['points']}/"
                     f"{row['max_points']} | {row['status']} | {summary} |")
    for task_id in sorted(results, key=task_key):
        result = results[task_id]
        if result.status != "pass":
            lines += ["", f"## Task {task_id} · {TASKS[task_id].title} · {result.status}", "", "```text",
                      *result.message.splitlines()[:15], "```"]
    lines += ["", "## How this was graded", "",
              f"Each task's checks ran your code in a separate process ({note}); its outputs were "
              "compared with the course's reference implementation. Using the reference itself fails the task; the "
              "allowed helpers are:", "", "```text", allowed_helpers_text(), "```",
              "", "Grade yourself before you submit: `python -m minilin grade` in the course folder.", ""]
    return "\n".join(lines)
