"""Points per task and partial credit: a TOML rubric, and what a Result earns from the checks it passed.

    default = 1
    [points]
    "4" = 2                  # every task of chapter 4
    "4.3" = 3                # a task (wins over its chapter)
    [weights]
    "1.4" = [1, 1, 1, 2, 2]  # one weight per check of task 1.4, in check order (public, then hidden)

A task with c checks that passes p of them earns p/c of its points; with weights, the passed checks' share of
the weights. A weight list must have one number per check: `check_weights` says so, naming the fix.
"""
import math
import tomllib
from pathlib import Path

from minilin.cli import UsageError
from minilin.grading.course import CHAPTERS, TASKS, task_key


class Points(dict):
    """{task id: points}, and `weights`: {task id: one weight per check} for the tasks the rubric weights."""

    def __init__(self, *args, weights=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.weights = dict(weights or {})


def default_points():
    return Points({task_id: 1 for task_id in TASKS})


def load_rubric(path):
    """Points (a dict of {task id: points}, with .weights) from a TOML rubric; every task not named gets
    `default` (1 when absent). See the module's docstring for the format."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--rubric {path}: no such file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"--rubric {path}: not valid TOML ({err})") from None
    unknown = set(data) - {"default", "points", "weights"}
    if unknown:
        raise UsageError(f"--rubric {path}: unknown keys {sorted(unknown)}; use `default`, a [points] table and "
                         "a [weights] table")
    default = _points(data.get("default", 1), path, "default")
    points = Points({task_id: default for task_id in TASKS})
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
    weights = data.get("weights", {})
    if not isinstance(weights, dict):
        raise UsageError(f"--rubric {path}: [weights] must be a table of \"N.M\" = [one weight per check]")
    for key, value in weights.items():
        if key not in TASKS:
            raise UsageError(f"--rubric {path}: [weights] {key!r} is not a task (e.g. \"1.4\"); weights are per task")
        if not isinstance(value, list) or not value:
            raise UsageError(f"--rubric {path}: [weights] {key!r} must be a list of numbers, one per check, e.g. "
                             f"[1, 1, 2]")
        items = [_points(w, path, f"{key} weights") for w in value]
        if not sum(items) > 0:
            raise UsageError(f"--rubric {path}: [weights] {key!r} must have a weight > 0")
        points.weights[key] = items
    return points


def check_weights(points, counts, source="--rubric"):
    """Every weight list has one number per check of its task; `counts` is {task id: number of checks}."""
    for task_id, weights in sorted(getattr(points, "weights", {}).items(), key=lambda kv: task_key(kv[0])):
        if task_id in counts and len(weights) != counts[task_id]:
            raise UsageError(f"{source}: [weights] \"{task_id}\" lists {len(weights)} weights but task {task_id} "
                             f"has {counts[task_id]} checks: give {counts[task_id]} weights, one per check in "
                             "order (public checks, then hidden ones), or drop the line for equal weights")


def _points(value, path, key):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UsageError(f"--rubric {path}: points for {key!r} must be a number >= 0, got {value!r}")
    return value


PLACES = 4  # points are written with 4 decimals in every export (a task's 2 of 7 checks: 0.2857)


def rounded(x):
    return round(x, PLACES)


def fmt_points(x):
    return f"{rounded(x):g}"


def earned(result, max_points, weights=None):
    """The points a result earns out of `max_points`: the share of its checks (or their weights) that passed."""
    if result.status == "pass":
        return max_points
    checks = getattr(result, "checks", ())
    if not checks:
        return 0
    weights = weights if weights and len(weights) == len(checks) else [1] * len(checks)
    share = sum(w for w, ok in zip(weights, checks) if ok) / sum(weights)
    return max_points * share


def task_points(result, points, task_id=None):
    """What `result` earns under `points` (a Points or a plain {task id: points})."""
    task_id = task_id or result.task
    return earned(result, points[task_id], getattr(points, "weights", {}).get(task_id))
