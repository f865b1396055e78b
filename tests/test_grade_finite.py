"""Every check fails NaN, inf and wrongly shaped answers (issue 44, item 4), for whatever tasks exist.

Each check runs the solution once, in-process (as the course's own tests do); its results are then broken four
ways and judged again: every check whose results changed must fail. A check that compares a learner's outputs
with each other (the future must not leak, the same seed gives the same draw) or a hand-written `if diff > tol`
would let NaN through.
"""
import importlib.util
import math
import tempfile
from pathlib import Path

import pytest
import torch

from minilin.grading.calls import dumps, execute, loads_untrusted
from minilin.grading.checks import CannotGrade, compare
from minilin.grading.course import CHAPTERS, TASKS
from minilin.grading.runner import judge

ROOT = Path(__file__).resolve().parent.parent


BREAKS = ("nan", "one nan", "inf", "shape")


def broken(value, how, changed):
    """`value` (a decoded result) with every floating tensor or float broken `how`; `changed` records whether
    anything was (an answer without floats, e.g. a Python int, is left as it is)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
        changed.append(True)
        if how == "shape":
            flat = value.reshape(-1)
            return flat[:-1] if flat.numel() > 1 else torch.cat([flat, flat])
        out = value.clone()
        if how == "one nan":
            out.view(-1)[out.numel() // 2] = math.nan
        else:
            out.fill_(math.nan if how == "nan" else math.inf)
        return out
    if type(value) is float:
        changed.append(True)
        return {"nan": math.nan, "one nan": math.nan, "inf": math.inf, "shape": [value, value]}[how]
    if type(value) in (list, tuple):
        return type(value)(broken(v, how, changed) for v in value)
    if type(value) is dict:
        return {k: broken(v, how, changed) for k, v in value.items()}
    return value


@pytest.mark.needs_solutions
@pytest.mark.parametrize("chapter", sorted({t.chapter for t in TASKS.values()}))
def test_every_check_fails_nan_inf_and_wrong_shapes(chapter):
    """Each check runs the solution once (in-process, as the course's own tests do); its results are then broken
    four ways (all NaN, one NaN, all inf, a wrong shape) and every check whose results changed must fail."""
    path = ROOT / "solutions" / CHAPTERS[chapter].file
    spec = importlib.util.spec_from_file_location(f"_nan_solution_{chapter}", path)
    solution = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solution)
    passed = []
    for task in (t for t in TASKS.values() if t.chapter == chapter):
        try:
            steps = task.steps()
        except CannotGrade:
            continue
        for number, step in enumerate(steps, start=1):
            with tempfile.TemporaryDirectory() as scratch:
                values = [loads_untrusted(dumps(execute(solution, call, scratch))) for call in step.calls]
            assert judge(step, values) is None, (task.id, number)  # the solution passes
            for how in BREAKS:
                changed = []
                message = judge(step, [broken(v, how, changed) for v in values])
                if changed and message is None:
                    passed.append(f"{task.id} check {number} ({how}): {step.calls[0].describe()[:60]}")
    assert not passed, "checks that pass a broken answer:\n" + "\n".join(passed)


def test_the_comparison_names_nan_and_inf():
    expected = torch.linspace(-1, 1, 12, dtype=torch.float64).view(3, 4)
    got = expected.clone()
    got[1, 2] = math.nan
    assert "NaN in 1 of 12 entries where the reference is finite, first at index (1, 2)" in compare(got, expected)
    assert "inf where the reference is finite" in compare(math.inf, 0.5)
    assert "NaN where the reference is finite" in compare(math.nan, 0.5)
    assert compare(expected.clone().fill_(math.nan), expected.clone().fill_(math.nan)) is None  # NaN expected
