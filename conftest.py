"""Test-session setup shared by unit tests, exercise tests and notebooks (pytest loads it first)."""
import importlib

import pytest
from hypothesis import settings

# deadline=None: CPU timing on shared CI runners varies; derandomize: the same examples every run.
settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=200)

IMPLS = ("solutions", "exercises")


def pytest_addoption(parser):
    parser.addoption(
        "--impl", choices=IMPLS, default=None,
        help="which implementation the exercise tests import: 'solutions' (must pass) or 'exercises' "
             "(your work). Default: both, where solutions must pass and every exercise stub must fail "
             "with NotImplementedError (so a test that passes on a stub is caught).")


def pytest_configure(config):
    for chapter in range(1, 10):
        for task in range(1, 10):
            config.addinivalue_line("markers", f"task{chapter}_{task}: exercise task {chapter}.{task}")


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
    metafunc.parametrize(
        "impl", ["solutions", pytest.param("exercises", marks=stub_must_fail)], indirect=True)


@pytest.fixture
def impl(request):
    """Returns a loader: impl("ex01_attention") -> the module from solutions/ or exercises/."""
    package = request.param
    return lambda name: importlib.import_module(f"{package}.{name}")
