"""Every exercise task's checks, run in-process on solutions/ (must pass) and exercises/ (stubs must fail).

The checks are defined once, in minilin/grading/exNN_*.py; `python -m minilin grade` runs the same checks
on a learner's files in a separate process. Select one side with `--impl solutions` or `--impl exercises`,
one task with its marker: `pytest tests/exercises -m task1_4`.
"""
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
