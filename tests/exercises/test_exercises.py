"""Every exercise task's checks, run in-process on solutions/ (must pass) and exercises/ (stubs must fail).

The checks are defined once, in minilin/grading/exNN_*.py; `python -m minilin grade` runs the same checks
on a learner's files in a separate process. Select one side with `--impl solutions` or `--impl exercises`,
one task with its marker: `pytest tests/exercises -m task1_4`.
"""
from pathlib import Path

import pytest
import torch

from minilin.grading.checks import CannotGrade
from minilin.grading.course import CHAPTERS, TASKS
from minilin.grading.runner import run_in_process

PEERS = {"5.3", "5.4"}  # compare against linear-attention-transformer / linformer


def marks(task):
    return [getattr(pytest.mark, task.marker)] + ([pytest.mark.peers] if task.id in PEERS else [])


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Every tensor here is tiny: handing work to threads costs more than it saves, and on a busy 2-core
    # runner each hand-off can wait ~20 ms. One thread keeps these checks fast and their timing stable.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("task", [pytest.param(t, marks=marks(t), id=t.id) for t in TASKS.values()])
def test_task(impl, task):
    module = impl(CHAPTERS[task.chapter].module)
    try:
        run_in_process(task, module)
    except CannotGrade as err:
        pytest.skip(str(err))


MUTANTS = {
    # task: (function name, a wrong version that a check with one head dimension or N == M would let through)
    "1.1": ("scaled_scores", "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1) / 2.0\n"),
    "1.4": ("attention", "import torch\n"
                         "def attention(q, k, v, mask=None, causal=False):\n"
                         "    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
                         "    if mask is not None:\n"
                         "        s = s.masked_fill(~mask[:, None, None, :], float('-inf'))\n"
                         "    if causal:  # top-left aligned: right only when N == M\n"
                         "        n, m = s.shape[-2:]\n"
                         "        s = s.masked_fill(~torch.ones(n, m, dtype=torch.bool).tril(), float('-inf'))\n"
                         "    return torch.softmax(s, -1).nan_to_num(0.0) @ v\n"),
}


@pytest.mark.parametrize("task_id", sorted(MUTANTS))
def test_a_plausible_wrong_answer_fails(task_id, tmp_path, monkeypatch):
    import importlib.util
    name, code = MUTANTS[task_id]
    path = tmp_path / f"mutant_{task_id.replace('.', '_')}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(AssertionError):
        run_in_process(TASKS[task_id], module)


def test_the_last_hint_tier_teaches_without_the_solutions_code():
    """Tier 3 of every task's hints is the formula or the plan in words: no code span that calls, indexes or
    assigns (`f(x)`, `a[:, 1:]`, `x = ...`), which would hand over the solution's line."""
    import ast
    import re

    root = Path(__file__).resolve().parents[2] / "exercises"
    offenders = []
    for path in sorted(root.glob("ex[0-9][0-9]_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                doc = ast.get_docstring(node) or ""
                tier3 = re.search(r"\n\s*3\.(.*?)(?:\n\s*\n|\Z)", doc, re.S)
                if tier3:
                    offenders += [f"{path.name}:{node.name}: {span}"
                                  for span in re.findall(r"`[^`]*[(\[=][^`]*`", tier3.group(1))]
    assert not offenders, "tier-3 hints that hold code:\n" + "\n".join(offenders)
