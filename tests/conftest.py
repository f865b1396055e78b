"""Fixtures shared by the unit tests (the course-wide setup is the root conftest.py)."""
import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: handing work to threads costs more than it saves, and on a busy 2-core runner each
    hand-off can wait ~20 ms. Modules that opt in (`pytestmark = pytest.mark.usefixtures("one_thread")`)
    run on one thread, fast and with stable timing."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
