"""Grade the exercises: run tests/exercises against exercises/ (or solutions/) and print a per-task table.

    python -m minilin grade                 # every chapter, your exercises/
    python -m minilin grade --chapter 4     # one chapter
    python -m minilin grade --impl solutions

A task passes when every test marked with it passes. Needs the course checkout (tests/ beside minilin/).
"""
import argparse
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TASK = re.compile(r"^task(\d)_(\d)$")


class TaskCollector:
    """A pytest plugin that records each test's outcome under its task marker(s)."""

    def __init__(self):
        self.results = defaultdict(list)  # "1.2" -> [(nodeid, outcome)]
        self.tasks_of = {}

    def pytest_collection_modifyitems(self, items):
        for item in items:
            self.tasks_of[item.nodeid] = [f"{m[1]}.{m[2]}" for mk in item.iter_markers()
                                          if (m := TASK.match(mk.name))]

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = "passed" if report.passed else ("skipped" if report.skipped else "failed")
            for task in self.tasks_of.get(report.nodeid, []):
                self.results[task].append((report.nodeid, outcome))


def task_table(results):
    """Rows (task, passed tests, total tests, status) sorted by task, and the score in percent."""
    rows = []
    for task in sorted(results, key=lambda t: tuple(int(p) for p in t.split("."))):
        outcomes = [o for _, o in results[task]]
        passed = outcomes.count("passed")
        rows.append((task, passed, len(outcomes), "PASS" if passed == len(outcomes) else "todo"))
    done = sum(r[3] == "PASS" for r in rows)
    return rows, (100.0 * done / len(rows) if rows else 0.0)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m minilin grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapter", type=int, default=None, help="grade only this chapter's tasks (1-9)")
    parser.add_argument("--impl", choices=("exercises", "solutions"), default="exercises",
                        help="which folder to grade (default: exercises, your work)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")
    args = parser.parse_args(argv)
    tests = ROOT / "tests" / "exercises"
    if not tests.is_dir():
        parser.error(f"no tests/exercises folder next to the minilin package; run from the course checkout")
    pytest_args = [str(tests), f"--impl={args.impl}", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                   "-c", str(ROOT / "pyproject.toml")]
    if args.chapter is not None:
        pytest_args += ["-m", " or ".join(f"task{args.chapter}_{t}" for t in range(1, 10))]
    pytest_args += ["-v"] if args.verbose else ["-p", "no:terminal"]
    collector = TaskCollector()
    pytest.main(pytest_args, plugins=[collector])
    rows, score = task_table(collector.results)
    if not rows:
        print("no exercise tests were collected")
        return 1
    print(f"{'task':<6}{'tests passed':>14}  status")
    for task, passed, total, status in rows:
        print(f"{task:<6}{f'{passed}/{total}':>14}  {status}")
    done = sum(r[3] == "PASS" for r in rows)
    print(f"score: {done}/{len(rows)} tasks ({score:.0f}%) [{args.impl}]")
    return 0
