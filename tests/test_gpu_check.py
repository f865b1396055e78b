"""tests/gpu/check.sh, the one command that checks the course on a GPU, runs here on the CPU (on notebook 00 only) so
that it cannot rot: every step passes and its report says so; a wrong option is one line and exit code 2."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "gpu" / "check.sh"


def run(*args, timeout=900):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python")})


@pytest.mark.needs_solutions  # the teacher copy's CI runs it; the student copy's own suite (run inside CI too) skips it
def test_the_gpu_check_runs_on_the_cpu_and_reports(tmp_path):
    proc = run("--device", "cpu", "--notebooks", "notebooks/00_start_here.ipynb", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# The course checked on cpu") and "FAIL" not in report
    rows = [line for line in report.splitlines() if line.startswith("| ") and "| pass |" in line]
    assert len(rows) == 3 and "strict nbval (1 notebooks)" in rows[0]
    assert "passed" in rows[0] and "passed" in rows[1]  # the pytest summaries reached the report
    assert list((tmp_path / "bench").glob("*.csv")), sorted(p.name for p in tmp_path.rglob("*"))


def test_a_wrong_option_is_one_line_and_exit_2():
    for args in (["--device", "gpu"], ["--frobnicate"]):
        proc = run(*args, timeout=60)
        assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc
