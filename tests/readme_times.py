"""Measure the times in the README's command table and store them in results/reference/readme_times.csv.

    python tests/readme_times.py            # every row (about an hour on 2 cores)
    python tests/readme_times.py --only grade,sample

Each command of the README's "Command line" table (except the CUDA row) runs once, in the order of the table,
inside a fresh `git clone` of this checkout (so `checkpoints/` and `results/` start empty and nothing here is
overwritten), with the Python running this script. The CSV records the wall time, the machine's core count, the
load average before and after, and the date. `tests/test_readme.py` checks that the README shows, for every
row, the time this file holds (rounded as `readme_time` below rounds it).
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "reference" / "readme_times.csv"
FIELDS = ["command", "seconds", "exit_code", "cores", "load_before", "load_after", "date", "torch"]


def table_commands(readme: str) -> list[tuple[str, str]]:
    """(command, time cell) for each row of the README's command table, in order."""
    section = readme.split("## Command line", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        m = re.match(r"\|\s*`(python -m minilin[^`]*)`\s*\|.*\|\s*([^|]+?)\s*\|\s*$", line)
        if m:
            rows.append((m.group(1), m.group(2)))
    return rows


def timed_rows(readme: str) -> list[tuple[str, str]]:
    """The rows this script measures: all but the ones that need a GPU."""
    return [(c, t) for c, t in table_commands(readme) if "--device cuda" not in c]


def readme_time(seconds: float) -> str:
    """How the README writes a measured time: seconds below a minute, else whole minutes."""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    return f"{max(1, round(seconds / 60))} min"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated words; time only rows whose command contains one")
    args = ap.parse_args(argv)
    import torch

    rows = timed_rows((ROOT / "README.md").read_text())
    words = [w for w in args.only.split(",") if w]
    if words:
        rows = [r for r in rows if any(w in r[0] for w in words)]
    old = {}
    if OUT.exists():
        with OUT.open() as f:
            old = {r["command"]: r for r in csv.DictReader(f)}
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "course"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = dict(os.environ, PYTHONPATH=str(clone))
        for command, _ in rows:
            argv_ = shlex.split(command)
            argv_[0] = sys.executable
            before = load_average()
            t0 = time.perf_counter()
            proc = subprocess.run(argv_ + ["--no-progress"] if _takes_no_progress(argv_) else argv_,
                                  cwd=clone, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            seconds = time.perf_counter() - t0
            if proc.returncode not in (0, 1):  # grade exits 1 when a task fails (the stubs do)
                sys.stderr.write(proc.stderr[-2000:])
                raise SystemExit(f"{command}: exit code {proc.returncode}")
            old[command] = dict(command=command, seconds=f"{seconds:.1f}", exit_code=proc.returncode,
                                cores=os.cpu_count(), load_before=before, load_after=load_average(),
                                date=dt.date.today().isoformat(), torch=torch.__version__)
            print(f"{readme_time(seconds):>7}  {seconds:8.1f} s  load {before} -> {load_average()}  {command}",
                  flush=True)
            _write(old)
    return 0


def _takes_no_progress(argv: list[str]) -> bool:
    """train and bench draw progress bars; the table's time is the same without them."""
    return len(argv) > 3 and argv[3] in {"train", "bench"}


def _write(rows: dict) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows.values():
            w.writerow(r)
    tmp.replace(OUT)


if __name__ == "__main__":
    raise SystemExit(main())
