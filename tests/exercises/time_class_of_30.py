"""Time the teacher's command on a class of 30 copies of the solutions (target: under 3 minutes on 2 cores).

    python tests/exercises/time_class_of_30.py [--students 30] [--jobs 2] [--sandbox auto|bwrap|none]

Builds DIR/<student>/exNN_*.py from solutions/ in a temporary folder, runs
`python -m minilin grade --submissions DIR --out gradebook.csv --jobs J`, checks every task passed, and prints
the wall-clock time and the CPU time of the grader and its children. Not collected by pytest (not test_*).
"""
import argparse
import csv
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sandbox", default="auto", help="auto, bwrap or none (CPU time counts children only "
                        "unsandboxed: bwrap's init reaps the sandboxed ones)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        klass = Path(tmp) / "submissions"
        for i in range(args.students):
            (klass / f"student{i:02d}").mkdir(parents=True)
            for path in (ROOT / "solutions").glob("ex[0-9][0-9]_*.py"):
                shutil.copyfile(path, klass / f"student{i:02d}" / path.name)
        out = Path(tmp) / "gradebook.csv"
        command = [sys.executable, "-m", "minilin", "grade", "--submissions", str(klass), "--out", str(out),
                   "--jobs", str(args.jobs), "--sandbox", args.sandbox]
        start = time.monotonic()
        env = {**os.environ, "TQDM_DISABLE": "1"}
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        wall = time.monotonic() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.exit(proc.stderr)
        with open(out, newline="") as handle:
            rows = list(csv.DictReader(handle))
        passed = sum(r["status"] == "pass" for r in rows)
        print(proc.stdout.splitlines()[0])
        print(f"{args.students} students x {len(rows) // args.students} tasks: {passed}/{len(rows)} pass; "
              f"--jobs {args.jobs} on {os.cpu_count()} CPUs: {wall:.0f} s wall, "
              f"{usage.ru_utime + usage.ru_stime:.0f} s CPU (grader + children); "
              f"load average now {os.getloadavg()[0]:.1f}")
        if passed != len(rows):
            sys.exit("not every task passed")


if __name__ == "__main__":
    main()
