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
