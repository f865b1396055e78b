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
             "(the stubs, rebuilt pristine from exercises/ in a temporary folder, as `python -m minilin release` "
             "writes them). Default: both, where solutions must pass and every stub must fail with "
             "NotImplementedError (so a test that passes on a stub is caught). Your own work in exercises/ is "
             "graded by `python -m minilin grade`.")


def pytest_configure(config):
    for chapter in range(1, 11):
        for task in range(1, 21):  # task numbers go past 9 (Task 7.10)
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


@pytest.fixture(scope="session")
def pristine_stubs(tmp_path_factory):
    """A folder of the exercise files as released: every task function written back to its stub (the same
    function `python -m minilin release` uses), built from exercises/ in a temporary folder. The stub side of
    the exercise tests imports these, never exercises/ itself: a learner's solved tasks keep `pytest tests`
    green, and a stub is still checked to fail."""
    from minilin.grading.release import write_stubs
    folder = tmp_path_factory.mktemp("pristine") / "exercises"
    write_stubs(ROOT / "exercises", folder)
    return folder


def load_stub(folder, name):
    """The module `name` of a folder of stubs, imported under its own name (not the course's exercises.*)."""
    import importlib.util
    import sys
    key = f"minilin_pristine_stubs.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(folder) / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[key] = module
    return sys.modules[key]


@pytest.fixture
def impl(request):
    """Returns a loader: impl("ex01_attention") -> the module from solutions/, or the pristine stub built from
    exercises/ (the `pristine_stubs` fixture) for the "exercises" side."""
    package = request.param
    if package == "solutions":
        return lambda name: importlib.import_module(f"{package}.{name}")
    # The course's CI (MINILIN_REQUIRE_STUBS) also holds exercises/ itself to be the stubs; a learner's solved
    # tasks are no concern of these tests: `python -m minilin grade` grades them.
    if os.environ.get("MINILIN_REQUIRE_STUBS") and (edited := edited_tasks(request.node)):
        pytest.fail(f"task {', '.join(edited)}: exercises/ holds work, not the stub (MINILIN_REQUIRE_STUBS is "
                    f"set: the course's exercises/ must be the stubs)")
    folder = request.getfixturevalue("pristine_stubs")
    return lambda name: load_stub(folder, name)


def pytest_terminal_summary(terminalreporter):
    """The learner's budget, every notebook's main line (tests/test_notebook_text.py asserts it): printed at the
    end of any run that collected those tests."""
    if not any("test_main_line_within_the_learners_budget" in r.nodeid
               for reports in terminalreporter.stats.values() for r in reports if hasattr(r, "nodeid")):
        return
    import importlib.util
    spec = importlib.util.spec_from_file_location("_budget", ROOT / "tests" / "test_notebook_text.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    terminalreporter.section("the learner's budget: main line of each notebook (3,000 words, 400 code lines)")
    terminalreporter.write_line(module.budget_table())
