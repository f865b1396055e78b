"""Inside the sandbox each chapter imports only what it allows: names built at run time, exec of the package's
files, sys.modules and the peer libraries all fail a task that reaches for the reference, with a message that says
why, while the tasks that do their own work keep their points.

One module fixture grades a few small submissions (chapters 1, 3 and 5) in one Session, two at a time. Skipped
where bwrap cannot create a sandbox, unless MINILIN_REQUIRE_SANDBOX=1 (CI), which makes that a failure.
"""
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from minilin.grading import sandbox
from minilin.grading.course import CHAPTERS, select
from minilin.grading.runner import Limits, Session

ROOT = Path(__file__).resolve().parent.parent
NOT_ALLOWED = "not allowed in this chapter"
ATTENTION = str(ROOT / "minilin" / "attention.py")  # where the course keeps the reference: a learner can know it

CHEATS = f'''
import linformer  # imported at the top: only its use fails, so the tasks that do not use it keep their points


def stable_softmax(scores, dim=-1):  # Task 1.2 through sys.modules
    import sys
    return sys.modules["mini" + "lin.attention"].functional.softmax(scores, dim=dim)


def causal_mask(n, m, prefix=0):  # Task 1.3: exec of the reference's source, read from the package's folder
    import importlib
    import pathlib
    package = importlib.import_module("nilinim"[::-1])
    paths = [pathlib.Path(package.__file__).parent / "attention.py", pathlib.Path({ATTENTION!r})]
    source = ([p for p in paths if p.is_file()] or paths[-1:])[0].read_text()  # the last one raises if hidden
    namespace = {{}}
    exec(compile(source, "attention.py", "exec"), namespace)
    return namespace["allowed_keys"](n, m, causal=True)[0, 0]


def attention(q, k, v, mask=None, causal=False):  # Task 1.4: a module name built at run time
    import importlib
    module = importlib.import_module("noitnetta.nilinim"[::-1])
    return getattr(module, "_".join(["softmax", "attention"]))(q, k, v, mask=mask, causal=causal)


def saturated_rows(q, k, scale=None, threshold=0.99):  # Task 1.5: a peer library chapter 1 does not allow
    layer = linformer.LinformerSelfAttention(dim=8, seq_len=k.shape[2], k=4)
    return (q @ k.transpose(-2, -1)).softmax(-1).amax(-1).ge(threshold).double().mean(-1) + 0 * layer.proj_k.sum()
'''
ROUTES = {"1.2": "minilin.attention is not allowed", "1.3": "attention.py",
          "1.4": "minilin.attention.softmax_attention is not allowed",
          "1.5": "linformer.LinformerSelfAttention is not allowed"}
WITHOUT_THE_GUARD = '''
def mean_pool_projection(k, n, dtype=None):  # Task 3.1: remove the import hook, then import a module built at run time
    import importlib
    import sys
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "Guard"]
    sys.modules["mini" + "lin"].__dict__.pop("__getattr__", None)
    return importlib.import_module("remrofnil.nilinim"[::-1]).mean_pool_matrix(k, n, dtype=dtype)
'''
PEERS_IN_CHAPTER_5 = '''
def transplant_into_lat(ours, lat, causal=False):
    from linear_attention_transformer.linear_attention_transformer import SelfAttention
    assert isinstance(lat, SelfAttention)
    return _transplant_into_lat(ours, lat, causal=causal)
def linformer_into_ours(theirs, ours):
    import linformer
    assert isinstance(theirs, linformer.LinformerSelfAttention)
    return _linformer_into_ours(theirs, ours)
'''


def solution(chapter):
    return (ROOT / "solutions" / CHAPTERS[chapter].file).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    works, reason = sandbox.bwrap_status()
    if not works:
        if os.environ.get("MINILIN_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"MINILIN_REQUIRE_SANDBOX=1 but the grader cannot sandbox: {reason}")
        pytest.skip(f"the import checks need the sandbox (unsandboxed, honesty is checked statically only): {reason}")
    ch5 = solution(5).replace("def transplant_into_lat(", "def _transplant_into_lat(") \
        .replace("def linformer_into_ours(", "def _linformer_into_ours(") + PEERS_IN_CHAPTER_5
    students = {
        "solutions": {c: solution(c) for c in (1, 3, 5)},
        "cheat": {1: solution(1) + CHEATS, 3: solution(3) + WITHOUT_THE_GUARD, 5: ch5},
    }
    base = tmp_path_factory.mktemp("imports")
    for name, files in students.items():
        (base / name).mkdir()
        for chapter, text in files.items():
            (base / name / CHAPTERS[chapter].file).write_text(text, encoding="utf-8")
    with Session(select([1, 3, 5]), limits=Limits(timeout=60), mode="bwrap") as session, \
            ThreadPoolExecutor(2) as pool:
        return dict(zip(students, pool.map(session.grade, [base / name for name in students])))


@pytest.mark.needs_solutions
def test_the_solutions_score_full_marks_in_their_chapters_view(graded):
    # chapter 3 imports its allowed helper (minilin.attention.softmax_attention); chapter 5 unpickles peers' layers
    assert all(r.status == "pass" for r in graded["solutions"].values()), \
        {t: r.message for t, r in graded["solutions"].items() if r.status != "pass"}


@pytest.mark.needs_solutions
@pytest.mark.parametrize("task", sorted(ROUTES))
def test_reaching_for_the_reference_scores_zero_with_the_reason(graded, task):
    result = graded["cheat"][task]
    assert result.status == "error", result
    assert NOT_ALLOWED in result.message and "chapter 1 allows no minilin helpers" in result.message, result.message
    assert ROUTES[task] in result.message, result.message
    assert graded["cheat"]["1.1"].status == "pass"  # its own work keeps its points


@pytest.mark.needs_solutions
def test_without_the_import_hook_the_files_are_still_not_there(graded):
    result = graded["cheat"]["3.1"]
    assert result.status == "error" and "minilin.linformer is not allowed in this chapter (chapter 3 allows " \
        "minilin.attention.softmax_attention)" in result.message, result
    assert graded["cheat"]["3.3"].status == "pass"


@pytest.mark.needs_solutions
def test_a_task_whose_inputs_come_from_a_peer_may_import_it(graded):
    if any(r.message.startswith("cannot be graded here") for r in graded["cheat"].values()):
        pytest.skip("the peer libraries are not installed (pip install -e \".[course]\")")
    assert {t: r.status for t, r in graded["cheat"].items() if t.startswith("5.")} == \
        {t: "pass" for t in CHAPTERS[5].tasks}


def test_unsandboxed_the_notice_says_honesty_is_checked_statically_only():
    assert sandbox.choose("none")[1].endswith("honesty is checked statically only")
