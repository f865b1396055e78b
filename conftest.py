"""Test-session setup shared by unit tests, exercise tests and notebooks (pytest loads it first)."""
import importlib
import os
import re
from pathlib import Path

# Under pytest-xdist (`-n auto`), share the cores between the workers instead of letting every worker (and every
# notebook kernel it starts, which inherits this environment) run one thread per core: oversubscribed BLAS
# threads make a loaded 2-core machine several times slower. Set before torch is imported anywhere.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _share = max(1, (os.cpu_count() or 1) // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(_share))

import pytest
from hypothesis import settings

# deadline=None: CPU timing on shared CI runners varies; derandomize: the same examples every run.
settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=200)

ROOT = Path(__file__).resolve().parent
IMPLS = ("solutions", "exercises")
TASK_MARKER = re.compile(r"^task(\d)_(\d)$")


def pytest_addoption(parser):
    parser.addoption(
        "--impl", choices=IMPLS, default=None,
        help="which implementation the exercise tests import: 'solutions' (must pass) or 'exercises' "
             "(your work). Default: both, where solutions must pass and every exercise stub must fail "
             "with NotImplementedError (so a test that passes on a stub is caught); a task you have started "
             "is skipped there and graded by `python -m minilin grade`.")


def pytest_configure(config):
    for chapter in range(1, 10):
        for task in range(1, 10):
            config.addinivalue_line("markers", f"task{chapter}_{task}: exercise task {chapter}.{task}")
    config.addinivalue_line("markers", "needs_solutions: needs the course's solutions/ (a student copy made by "
                                       "`python -m minilin release` has none: skipped there)")


def pytest_collection_modifyitems(config, items):
    if (ROOT / "solutions").is_dir():
        return
    skip = pytest.mark.skip(reason="needs solutions/, which a student copy of the course does not ship")
    for item in items:
        if item.get_closest_marker("needs_solutions"):
            item.add_marker(skip)


def pytest_generate_tests(metafunc):
    if "impl" not in metafunc.fixturenames:
        return
    chosen = metafunc.config.getoption("--impl")
    if chosen is not None:
        metafunc.parametrize("impl", [chosen], indirect=True)
        return
    stub_must_fail = pytest.mark.xfail(
        strict=True, raises=NotImplementedError,
        reason="exercise stubs raise NotImplementedError; a pass here means the test cannot fail")
    present = ["solutions"] if (ROOT / "solutions").is_dir() else []  # a student copy has no solutions/
    metafunc.parametrize("impl", present + [pytest.param("exercises", marks=stub_must_fail)], indirect=True)


def edited_tasks(node):
    """The task ids of this test whose functions in exercises/ are no longer pristine stubs."""
    from minilin.grading.course import CHAPTERS, TASKS
    from minilin.grading.honesty import pristine
    edited = []
    for marker in node.iter_markers():
        if (m := TASK_MARKER.match(marker.name)) and (task := TASKS.get(f"{m[1]}.{m[2]}")):
            path = ROOT / "exercises" / CHAPTERS[task.chapter].file
            if not path.is_file() or not pristine(path.read_text(encoding="utf-8"), task.functions):
                edited.append(task.id)
    return edited


@pytest.fixture
def impl(request):
    """Returns a loader: impl("ex01_attention") -> the module from solutions/ or exercises/."""
    package = request.param
    if package == "exercises" and request.config.getoption("--impl") is None:
        # The "stub must fail" guard holds for pristine stubs only: a learner's started task would XPASS.
        if edited := edited_tasks(request.node):
            message = (f"task {', '.join(edited)}: exercises/ holds your work, not the stub; grade it with "
                       f"`python -m minilin grade --task {edited[0]}`")
            if os.environ.get("MINILIN_REQUIRE_STUBS"):  # the course's CI: exercises/ must be the stubs
                pytest.fail(message)
            pytest.skip(message)
    return lambda name: importlib.import_module(f"{package}.{name}")
