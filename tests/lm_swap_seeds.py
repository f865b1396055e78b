"""Notebook 07's section 5 and 7 runs (your ByteLM, exact vs elu+1 attention) on several seeds:
results/reference/lm_swap_seeds.csv.

    python tests/lm_swap_seeds.py                      # seeds 0,1,2 (about 2 minutes a seed on one CPU thread)
    python tests/lm_swap_seeds.py --seeds 0 --out /tmp/s.csv   # a quick try
    python tests/lm_swap_seeds.py --lr 0.01 --out /tmp/lr.csv  # the same runs at another constant rate
    python tests/lm_swap_seeds.py --mixing previous,off --lr 0.01 --out /tmp/c.csv  # the two controls instead
    python tests/lm_swap_seeds.py --steps 1600 --every 400 --out results/reference/lm_swap_long.csv  # longer runs
    python tests/lm_swap_seeds.py --mixing twobytes --out results/reference/lm_swap_seeds_twobytes.csv
        # the two-byte network: the fixed read in layer 0, layer 1's mixing off (a mixing step per layer)
    python tests/lm_swap_seeds.py --mixing twobytes --steps 1600 --every 400 --out results/reference/lm_swap_long_twobytes.csv

The model, the loop, the sizes and the validation bytes are the notebook's own: the script runs the notebook's code
cells up to the one that defines `train_lm` (leaving out the statements there that call it) and the later definition
of `previous_byte_mix`, then calls train_lm(mix, seed) for each seed and mixing step. --steps replaces the notebook's STEPS (train_lm scores
every 100 steps; --every picks which of those scores become rows, with a `step` column; default: the last only). The
CSV is rewritten after every run, so an interrupted sweep keeps the runs it finished; its header records the command,
machine, date, sizes and the seeds with a finished run. tests/test_reference_lm_swap.py checks that the notebook's stored
seed-0 outputs agree with lm_swap_seeds.csv's seed-0 rows.
"""
from __future__ import annotations

import argparse
import ast
import csv
import datetime as dt
import json
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
NOTEBOOK = ROOT / "notebooks" / "07_tiny_lm.ipynb"
OUT = ROOT / "results" / "reference" / "lm_swap_seeds.csv"
MIXES = {"exact": "causal_softmax_mix", "linear": "causal_linear_mix", "previous": "previous_byte_mix", "off": "no_mix",
         "twobytes": ("previous_byte_mix", "no_mix")}   # a tuple: one mixing step per layer (the two-byte network)


def notebook_namespace():
    """Run the notebook's code cells up to the definition of train_lm, without the statements that train; then only
    the later definition of previous_byte_mix (the fixed-read control)."""
    ns = {"__name__": "lm_swap_seeds"}
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        if "train_lm" in ns:
            tree.body = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "previous_byte_mix"]
        else:
            tree.body = [s for s in tree.body
                         if not (isinstance(s, ast.Assign) and "train_lm(" in ast.unparse(s.value))]
        exec(compile(tree, str(NOTEBOOK), "exec"), ns)
        if "previous_byte_mix" in ns:
            return ns
    raise RuntimeError(f"{NOTEBOOK} defines no train_lm and previous_byte_mix")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--lr", type=float, default=None, help="AdamW's constant rate (default: the notebook's LR)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the notebook's STEPS)")
    parser.add_argument("--every", type=int, default=None, help="a row every this many steps (a multiple of 100)")
    parser.add_argument("--mixing", default="exact,linear", help="comma-separated, of " + ",".join(MIXES))
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    mixings = args.mixing.split(",")
    if not set(mixings) <= set(MIXES):
        parser.error(f"--mixing must name some of {','.join(MIXES)}, got {args.mixing}")
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    from minilin.train.compare import machine_line

    torch.set_num_threads(1)
    ns = notebook_namespace()
    ns["DEVICE"] = "cpu"
    if args.lr is not None:
        if not args.lr > 0:
            parser.error(f"--lr must be positive, got {args.lr:g}")
        ns["LR"] = args.lr  # passed to train_lm below (its default, lr=LR, was bound when the notebook defined it)
    if args.steps is not None:
        if args.steps < 100 or args.steps % 100:
            parser.error(f"--steps must be a positive multiple of 100 (train_lm scores every 100), got {args.steps}")
        ns["STEPS"] = args.steps  # train_lm reads the notebook's global STEPS
    every = args.every or ns["STEPS"]
    if every % 100 or ns["STEPS"] % every:
        parser.error(f"--every must be a multiple of 100 that divides the steps, got {every}")
    rows, done = [], set()
    for seed in seeds:
        for name in mixings:
            start = time.perf_counter()
            mix = MIXES[name]
            mix = [ns[m] for m in mix] if isinstance(mix, tuple) else ns[mix]
            _, curve = ns["train_lm"](mix, seed=seed, lr=ns["LR"])
            for step in range(every, ns["STEPS"] + 1, every):
                row = {"seed": seed, "mixing": name, "lr": ns["LR"]}
                if args.steps is not None or args.every is not None:
                    row["step"] = step
                rows.append({**row, "val_bits_per_byte": round(curve[step], 4)})
                print(rows[-1], flush=True)
            print(f"seed {seed}, {name}: {time.perf_counter() - start:.0f} s", flush=True)
            done.add(seed)
            write(args.out, argv, ns, rows, sorted(done), machine_line())
    print(f"wrote {args.out}")


def write(out, argv, ns, rows, seeds, machine):
    """(Re)write the CSV with the rows so far; the header names the seeds with a finished run."""
    header = [
        ("command: python tests/lm_swap_seeds.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))).strip(),
        f"machine: {machine}, one thread, cpu",
        "date: " + dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S +0000"),
        f"sizes: notebooks/07_tiny_lm.ipynb's ByteLM and train_lm: L={ns['L']}, d={ns['d']}, depth {ns['DEPTH']}, "
        f"heads {ns['H']}, {ns['STEPS']} steps, batch {ns['BATCH']}, AdamW lr {ns['LR']:g}, constant; seeds "
        + ",".join(map(str, seeds)),
        f"scored on: every validation window of L={ns['L']} bytes ({ns['y_val'].numel()} bytes); bigram counts "
        f"{ns['BASE']['bigram']:.4f}, trigram counts {ns['BASE']['trigram']:.4f} bits per byte on them",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        f.write("".join(f"# {line}\n" for line in header))
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
