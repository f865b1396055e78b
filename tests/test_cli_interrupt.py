"""Ctrl-C in every long command: one line on stderr that says where it stopped and what was kept, exit code
130, no traceback, no partial file, no child process left behind. Plus `--version` and the one line a Python
without the course's packages prints.

Each test starts `python -m minilin ...` in a session of its own (as a terminal's foreground job), waits until
the command has really started working (a line it prints, or a file it writes), then sends SIGINT to the whole
process group, as Ctrl-C in a terminal does.
"""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name == "nt", reason="POSIX signals and process groups")]

TINY = ["--block-size", "32", "--dim", "32", "--depth", "1", "--heads", "2", "--batch-size", "2",
        "--eval-batches", "1", "--device", "cpu"]


def start(argv, cwd):
    """The command in a session of its own; proc.seen holds what it has printed so far (both streams)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("TQDM_DISABLE", None)
    proc = subprocess.Popen([sys.executable, "-m", "minilin", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    proc.seen = {"out": [], "err": []}

    def pump(stream, into):
        for chunk in iter(lambda: stream.read(1), ""):
            into.append(chunk)
    proc.pumps = [threading.Thread(target=pump, args=(s, proc.seen[k]), daemon=True)
                  for s, k in ((proc.stdout, "out"), (proc.stderr, "err"))]
    for t in proc.pumps:
        t.start()
    return proc


def printed(proc, text, stream="err"):
    return lambda: text in "".join(proc.seen[stream])


def wait_for(condition, proc, timeout=300, what="the command to start working"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the command ended (exit {proc.returncode}) before {what}: "
                                 f"{''.join(proc.seen['err'])[-2000:]}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"timed out waiting for {what}")


def interrupt(proc):
    """Ctrl-C: SIGINT to the process group; returns (exit code, stdout, stderr)."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the command did not stop within 120 s of Ctrl-C")
    for t in proc.pumps:
        t.join(timeout=10)
    return proc.returncode, "".join(proc.seen["out"]), "".join(proc.seen["err"])


def no_process_left(pgid):
    for _ in range(50):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def assert_one_line(code, err, prog, *needles):
    assert code == 130, (code, err[-2000:])
    assert "Traceback" not in err, err[-3000:]
    last = [line for line in err.split("\n") if line.strip()][-1]   # a line of its own, after any bar
    assert last.startswith(f"python -m minilin {prog}: interrupted"), err[-2000:]
    for needle in needles:
        assert needle in last, (needle, last)
    return last


def test_train_interrupted_keeps_the_last_checkpoint(tmp_path):
    proc = start(["train", *TINY, "--steps", "100000", "--eval-interval", "5", "--ckpt-interval", "5",
                  "--out", "ck/lm.pt", "--no-progress"], tmp_path)
    wait_for(lambda: (tmp_path / "ck" / "lm.pt").exists(), proc, what="the first checkpoint")
    time.sleep(0.5)
    code, out, err = interrupt(proc)
    last = assert_one_line(code, err, "train", "at step", "of 100000", "ck/lm.pt holds step")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["lm.pt"], "a partial or temporary file was left"
    assert no_process_left(proc.pid)
    # the kept checkpoint is whole: training resumes from it
    held = int(last.split("holds step ")[1].split()[0])
    assert held % 5 == 0 and held >= 5


def test_bench_interrupted_writes_nothing(tmp_path):
    proc = start(["bench", "--quick", "--out", "out"], tmp_path)
    wait_for(printed(proc, "bench"), proc, what="the sweep's progress bar")   # past the imports, into the sweep
    code, out, err = interrupt(proc)
    assert_one_line(code, err, "bench", "no CSV or PNG was written")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert no_process_left(proc.pid)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    subprocess.run([sys.executable, "-m", "minilin", "train", *TINY, "--steps", "2", "--eval-interval", "1",
                    "--out", str(folder / "lm.pt"), "--no-progress"], cwd=folder, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    return folder / "lm.pt"


def test_sample_interrupted(tmp_path, checkpoint):
    proc = start(["sample", "--ckpt", str(checkpoint), "--tokens", "100000", "--recurrent", "no"], tmp_path)
    wait_for(printed(proc, "sample"), proc, what="sampling's progress bar")   # 100000 bytes take minutes
    code, out, err = interrupt(proc)
    assert_one_line(code, err, "sample", "nothing was written")
    assert list(tmp_path.iterdir()) == []
    assert no_process_left(proc.pid)


@pytest.mark.needs_solutions
def test_grade_interrupted_leaves_no_child_and_no_gradebook(tmp_path):
    proc = start(["grade", "--impl", "solutions"], ROOT)
    # the grader's first line (sandbox, time limit, memory) comes just before the chapters start
    wait_for(printed(proc, "per chapter", "out"), proc, what="grading to start")
    code, out, err = interrupt(proc)
    assert_one_line(code, err, "grade", "no gradebook")
    assert no_process_left(proc.pid), "a grading child outlived Ctrl-C"


@pytest.mark.needs_solutions
def test_grade_class_interrupted_writes_no_gradebook(tmp_path):
    subs = tmp_path / "subs"
    for name in ("ann", "bob", "cy"):
        (subs / name).mkdir(parents=True)
        (subs / name / "ex01_attention.py").write_text((ROOT / "solutions" / "ex01_attention.py").read_text())
    proc = start(["grade", "--submissions", str(subs), "--out", str(tmp_path / "book.csv"), "--jobs", "1"], ROOT)
    wait_for(printed(proc, "per chapter", "out"), proc, what="grading to start")
    code, out, err = interrupt(proc)
    assert_one_line(code, err, "grade", "no gradebook")
    assert not (tmp_path / "book.csv").exists()
    assert no_process_left(proc.pid)


def test_version():
    out = subprocess.run([sys.executable, "-m", "minilin", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().startswith("minilin 0.")


def test_a_python_without_the_courses_packages_says_so_in_one_line():
    # -S: no site-packages, so no torch; the course folder is still importable (the current directory)
    out = subprocess.run([sys.executable, "-S", "-m", "minilin", "grade"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert sys.executable in lines[0] and "'torch'" in lines[0] and "activate" in lines[0].lower()
    assert "!\"{sys.executable}\" -m minilin" in lines[0]  # quoted: a path with a space still works
