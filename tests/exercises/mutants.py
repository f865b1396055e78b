"""Planted wrong answers: a task's checks must fail on each (the test files test_mutants_*.py and
test_exercises.py list them). Import as `from mutants import assert_fails` (pytest puts this folder on sys.path)."""
import importlib.util
import re

import pytest

from minilin.grading.course import TASKS
from minilin.grading.runner import run_in_process


def assert_fails(task_id, code, tmp_path, name=None):
    """Write `code` as a module, import it, and require task `task_id`'s checks to fail on it."""
    path = tmp_path / f"mutant_{re.sub(r'[^0-9A-Za-z]+', '_', name or task_id)}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(AssertionError):
        run_in_process(TASKS[task_id], module)


def edited(solution_file, edits, name):
    """The solution's source with each (line, wrong line) pair of `edits` (a flat tuple) swapped in, once each."""
    code = solution_file.read_text(encoding="utf-8")
    for line, wrong in zip(edits[::2], edits[1::2]):
        assert code.count(line) == 1, f"{name}: the solution's line is gone or repeated: {line!r}"
        code = code.replace(line, wrong)
    return code
