"""Every exercise task's checks, run in-process on solutions/ (must pass) and exercises/ (stubs must fail).

The checks are defined once, in minilin/grading/exNN_*.py; `python -m minilin grade` runs the same checks
on a learner's files in a separate process. Select one side with `--impl solutions` or `--impl exercises`,
one task with its marker: `pytest tests/exercises -m task1_4`.
"""
from pathlib import Path

import pytest

from minilin.grading.checks import CannotGrade
from minilin.grading.course import CHAPTERS, TASKS
from minilin.grading.runner import run_in_process

PEERS = {"5.3", "5.4", "5.8"}  # compare against linear-attention-transformer / linformer


def marks(task):
    return [getattr(pytest.mark, task.marker)] + ([pytest.mark.peers] if task.id in PEERS else [])


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny tensors, one thread


@pytest.mark.parametrize("task", [pytest.param(t, marks=marks(t), id=t.id) for t in TASKS.values()])
def test_task(impl, task):
    module = impl(CHAPTERS[task.chapter].module)
    try:
        run_in_process(task, module)
    except CannotGrade as err:
        pytest.skip(str(err))


MUTANTS = {
    # task: (function name, a wrong version that a check with one head dimension or N == M would let through)
    "1.1": ("scaled_scores", "def scaled_scores(q, k):\n"
                             "    keys = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)\n"
                             "    return q @ keys.transpose(-2, -1) / 2.0\n"),
    "1.4": ("attention", "import torch\n"
                         "def attention(q, k, v, mask=None, causal=False):\n"
                         "    g = q.shape[1] // k.shape[1]\n"
                         "    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)\n"
                         "    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
                         "    if mask is not None:\n"
                         "        s = s.masked_fill(~mask[:, None, None, :], float('-inf'))\n"
                         "    if causal:  # top-left aligned: right only when N == M\n"
                         "        n, m = s.shape[-2:]\n"
                         "        s = s.masked_fill(~torch.ones(n, m, dtype=torch.bool).tril(), float('-inf'))\n"
                         "    top = s.amax(-1, keepdim=True).clamp(min=0)\n"
                         "    e = torch.exp(s - top)\n"
                         "    return e / (torch.exp(-top) + e.sum(-1, keepdim=True)) @ v\n"),
}


@pytest.mark.parametrize("task_id", sorted(MUTANTS))
def test_a_plausible_wrong_answer_fails(task_id, tmp_path):
    from mutants import assert_fails
    name, code = MUTANTS[task_id]
    assert_fails(task_id, code, tmp_path)


@pytest.mark.needs_solutions
def test_stubs_are_built_pristine_from_a_solved_exercises_folder(tmp_path):
    """A learner who solved chapter 1: the stub side still imports stubs (built the way `release` writes them),
    and every chapter 1 task's checks still fail on them with NotImplementedError."""
    import importlib.util
    import shutil

    from minilin.grading.honesty import pristine
    from minilin.grading.release import write_stubs

    root = Path(__file__).resolve().parents[2]
    solved = tmp_path / "course" / "exercises"
    shutil.copytree(root / "exercises", solved, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(root / "solutions" / "ex01_attention.py", solved / "ex01_attention.py")
    chapter = CHAPTERS[1]
    functions = [f for t in chapter.tasks.values() for f in t.functions]
    assert not pristine((solved / chapter.file).read_text(encoding="utf-8"), functions)  # the learner's work
    stubs = tmp_path / "stubs"
    write_stubs(solved, stubs)
    assert {p.name for p in stubs.glob("*.py")} == {p.name for p in solved.glob("ex[0-9][0-9]_*.py")}
    assert pristine((stubs / chapter.file).read_text(encoding="utf-8"), functions)
    assert (solved / chapter.file).read_text() == (root / "solutions" / chapter.file).read_text()  # untouched
    spec = importlib.util.spec_from_file_location("solved_copy_stub_ex01", stubs / chapter.file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for task in chapter.tasks.values():
        with pytest.raises(NotImplementedError):
            run_in_process(task, module)


def test_the_stub_side_never_imports_exercises(impl, pristine_stubs):
    """The "exercises" side loads the pristine stubs' files, not exercises/ (whatever it holds)."""
    module = impl("ex01_attention")
    if Path(module.__file__).parent.name == "solutions":
        return
    assert Path(module.__file__).resolve() == (pristine_stubs / "ex01_attention.py").resolve()
    raise NotImplementedError("the stub side: expected to xfail like every stub")
