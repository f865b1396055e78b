"""The first hour's edges of the command line: each gives one clear line, none is silent.

- `python -m minilin.grade ...` (a command's module run directly) does what `python -m minilin grade ...` does
  (it used to import the module, print nothing and exit 0);
- `python minilin grade` (a folder run as a script, without -m) is one line naming `python -m minilin grade`;
- `grade` says in its first line which exercises/ it grades, and that it is not the current folder's;
- `bench` on a busy machine (rounds that disagree, a load average above the cores) prints one warning line;
- Ctrl-C in `train` before its first checkpoint leaves no empty checkpoints/ behind;
- a mistyped option or choice gets a "did you mean".
"""
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from minilin import grade
from minilin.__main__ import main
from minilin.bench import cli as bench_cli
from minilin.checkpoint import check_writable

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}


def one_error_line(code, err, prog):
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0]


# --- a command's module run directly ---------------------------------------------------------------------------

def test_python_dash_m_minilin_grade_module_runs_the_grade_command(tmp_path):
    """A bad chapter number is found before any grading: without the module's __main__ block nothing runs at all
    (exit 0, no output), so this fails there."""
    proc = subprocess.run([sys.executable, "-m", "minilin.grade", "--chapter", "99"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=120)
    line = one_error_line(proc.returncode, proc.stderr, "python -m minilin grade")
    assert "99" in line, line


@pytest.mark.filterwarnings("ignore:'minilin.grade' found in sys.modules:RuntimeWarning")  # imported above
@pytest.mark.parametrize("module, command", [("minilin.grade", "grade"), ("minilin.grading.release", "release"),
                                             ("minilin.site", "site"), ("minilin.sample", "sample")])
def test_every_commands_module_run_directly_is_the_command(module, command, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [module, "--no-such-option"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module(module, run_name="__main__", alter_sys=False)
    one_error_line(stop.value.code, capsys.readouterr().err, f"python -m minilin {command}")


def test_python_minilin_without_dash_m_is_one_line_naming_the_command():
    proc = subprocess.run([sys.executable, "minilin", "grade", "--chapter", "1"], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)
    line = one_error_line(proc.returncode, proc.stderr, "python minilin")
    assert line.endswith("with -m: python -m minilin grade --chapter 1"), line
    assert proc.stdout == ""


# --- which folder grade grades -----------------------------------------------------------------------------------

@pytest.fixture
def stop_after_first_line(monkeypatch):
    """Grading stops (a usage error) right after the folder was chosen and named: no child process runs."""
    from minilin.grading import sandbox
    monkeypatch.setattr(sandbox, "choose", lambda mode: (None, "stopped by the test"))


def test_grade_from_another_folder_names_the_folder_it_grades_first(tmp_path, monkeypatch, capsys,
                                                                     stop_after_first_line):
    (tmp_path / "exercises").mkdir()  # a copy here is not what is graded: the line must say so
    monkeypatch.chdir(tmp_path)
    assert main(["grade", "--chapter", "1"]) == 2
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"grading folder: {ROOT / 'exercises'}/ "), first
    assert f"not the current folder {tmp_path}" in first and "--folder DIR" in first, first


def test_grade_in_the_course_folder_or_with_folder_names_it_plainly(tmp_path, monkeypatch, capsys,
                                                                     stop_after_first_line):
    monkeypatch.chdir(ROOT)
    assert main(["grade", "--chapter", "1"]) == 2
    assert capsys.readouterr().out.splitlines()[0] == "grading folder: exercises/"  # relative inside the course
    assert grade.folder_line(ROOT / "solutions", given=False) == "grading folder: solutions/"
    monkeypatch.chdir(ROOT / "notebooks")  # a notebook's grading cell: no machine path in its stored output
    assert grade.folder_line(ROOT / "exercises", given=False) == "grading folder: ../exercises/"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    assert main(["grade", "--chapter", "1", "--folder", "mine"]) == 2
    assert capsys.readouterr().out.splitlines()[0] == f"grading folder: {tmp_path / 'mine'}/ (--folder)"


# --- bench on a busy machine -------------------------------------------------------------------------------------

def rounds(*per_timing):
    """Rows as the sweep writes them: one time_fwd_round row per round of each (method, n) timing."""
    return [{"method": f"m{i}", "n": 256, "metric": "time_fwd_round", "status": "ok", "value": t}
            for i, times in enumerate(per_timing) for t in times]


def test_busy_warning_from_rounds_that_disagree_or_the_load():
    quiet = rounds([1.0, 1.1, 1.05], [2.0, 2.2, 2.1], [3.0, 3.3, 3.1], [4.0, 4.1, 4.2])
    assert bench_cli.busy_warning(quiet, load=0.5, ncores=2) is None
    # one timing in four disagrees (a GPU's launch-bound short lengths do): not a busy machine
    one_of_four = rounds([1.0, 1.1, 1.05], [2.0, 2.2, 2.1], [3.0, 3.3, 3.1], [1.0, 1.9, 1.0])
    assert bench_cli.busy_warning(one_of_four, load=None, ncores=2) is None
    busy = rounds([1.0, 4.0, 1.1], [2.0, 2.1, 6.0], [3.0, 3.1, 3.2], [4.0, 4.1, 4.2])
    line = bench_cli.busy_warning(busy, load=1.0, ncores=2)
    assert line.startswith("warning: this machine was busy (") and "\n" not in line, line
    assert "in 2 of 4 timings the slowest round took over 1.5x the fastest (worst 4.0x)" in line, line
    assert "may be meaningless" in line and "load average" not in line, line
    line = bench_cli.busy_warning(quiet, load=7.9, ncores=2)
    assert "the load average was 7.9 on 2 cores before it started" in line and "rounds" not in line.split("(")[1]
    assert bench_cli.busy_warning(rounds([1.0]), load=None, ncores=2) is None  # one round: nothing to compare


TINY_BENCH = ["bench", "--lengths", "32", "--model-lengths", "32", "--methods", "exact", "--heads", "2",
              "--dim-head", "8", "--min-run-time", "0.002", "--rounds", "1", "--no-plots", "--no-progress"]


@pytest.mark.parametrize("load, warned", [(99.0, True), (0.0, False)])
def test_bench_prints_the_warning_line_when_the_load_is_above_the_cores(load, warned, tmp_path, monkeypatch,
                                                                        capsys):
    monkeypatch.setattr(bench_cli, "load_average", lambda: load)
    assert main([*TINY_BENCH, "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    warnings = [line for line in err.splitlines() if line.startswith("warning: this machine was busy")]
    assert len(warnings) == int(warned), err
    if warned:
        assert f"load average was 99.0 on {bench_cli.cores()} cores" in warnings[0]
    assert "growth exponents" in out


# --- Ctrl-C in train ---------------------------------------------------------------------------------------------

def test_checking_the_checkpoint_path_leaves_no_folder_behind(tmp_path):
    check_writable(tmp_path / "checkpoints" / "deeper" / "lm.pt")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    check_writable(tmp_path / "kept" / "lm.pt")
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not any((tmp_path / "kept").iterdir())


@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="POSIX signals and process groups")
def test_train_interrupted_before_its_first_checkpoint_leaves_no_checkpoints_folder(tmp_path):
    from test_cli_interrupt import TINY, assert_one_line, interrupt, printed, start, wait_for
    proc = start(["train", *TINY, "--steps", "100000", "--eval-interval", "1", "--no-progress"], tmp_path)
    wait_for(printed(proc, "step      1 ", "out"), proc, what="the first step")
    code, out, err = interrupt(proc)
    assert "checkpoint: checkpoints/lm.pt" in out  # the default path, only written at the end
    assert_one_line(code, err, "train", "no checkpoint was written")
    assert list(tmp_path.iterdir()) == [], f"left behind: {sorted(p.name for p in tmp_path.rglob('*'))}"


def test_train_history_into_a_new_folder_is_still_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    from test_cli_interrupt import TINY
    assert main(["train", *TINY, "--steps", "2", "--eval-interval", "1", "--no-progress", "--no-save",
                 "--history", "logs/run/history.json"]) == 0
    assert (tmp_path / "logs" / "run" / "history.json").is_file()


# --- did you mean ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, guess", [
    (["grade", "--chapterr", "1"], "--chapter"),
    (["grade", "--chaptr=1"], "--chapter"),
    (["train", "--stpes", "3"], "--steps"),
    (["bench", "--lenghts", "256"], "--lengths"),
    (["grdae"], "grade"),
    (["grade", "--sandbox", "bwarp"], "bwrap"),
    (["train", "--attention", "performr"], "performer"),
    (["train", "--compare", "exact,performr"], "performer"),
])
def test_a_mistyped_option_or_choice_gets_did_you_mean(argv, guess, capsys):
    assert main(argv) == 2
    line = one_error_line(2, capsys.readouterr().err, "python -m minilin" + (f" {argv[0]}" if argv[0] in
                                                                             ("grade", "train", "bench") else ""))
    assert f"; did you mean {guess}? (see `" in line, line


def test_nothing_close_gets_no_guess(capsys):
    assert main(["grade", "--zzzzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err
