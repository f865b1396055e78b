"""Notebook 07's section 5 and 7 runs (your ByteLM, exact vs elu+1 attention) on several seeds:
results/reference/lm_swap_seeds.csv.

    python tests/lm_swap_seeds.py                      # seeds 0,1,2 (about 2 minutes a seed on one CPU thread)
    python tests/lm_swap_seeds.py --seeds 0 --out /tmp/s.csv   # a quick try
    python tests/lm_swap_seeds.py --lr 0.01 --out /tmp/lr.csv  # the same runs at another constant rate
    python tests/lm_swap_seeds.py --mixing previous,off --lr 0.01 --out /tmp/c.csv  # the two controls instead

The model, the loop, the sizes and the validation bytes are the notebook's own: the script runs the notebook's code
cells up to the one that defines `train_lm` (leaving out the statements there that call it) and the later definition
of `previous_byte_mix`, then calls train_lm(mix, seed) for each seed and mixing step. The CSV's header records the command, machine, date and sizes;
the notebook checks that its live seed-0 runs agree with the file's seed-0 rows.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
NOTEBOOK = ROOT / "notebooks" / "07_tiny_lm.ipynb"
OUT = ROOT / "results" / "reference" / "lm_swap_seeds.csv"
MIXES = {"exact": "causal_softmax_mix", "linear": "causal_linear_mix", "previous": "previous_byte_mix", "off": "no_mix"}


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
        ns["LR"] = args.lr  # train_lm reads the notebook's global LR when it builds its optimizer
    rows = []
    for seed in seeds:
        for name in mixings:
            _, curve = ns["train_lm"](ns[MIXES[name]], seed=seed)
            bits = round(curve[ns["STEPS"]], 4)
            rows.append({"seed": seed, "mixing": name, "lr": ns["LR"], "val_bits_per_byte": bits})
            print(rows[-1], flush=True)
    header = [
        ("command: python tests/lm_swap_seeds.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))).strip(),
        f"machine: {machine_line()}, one thread, cpu",
        "date: " + dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S +0000"),
        f"sizes: notebooks/07_tiny_lm.ipynb's ByteLM and train_lm: L={ns['L']}, d={ns['d']}, depth {ns['DEPTH']}, "
        f"heads {ns['H']}, {ns['STEPS']} steps, batch {ns['BATCH']}, AdamW lr {ns['LR']:g}, constant; seeds "
        + ",".join(map(str, seeds)),
        f"scored on: every validation window of L={ns['L']} bytes ({ns['y_val'].numel()} bytes); bigram counts "
        f"{ns['BASE']['bigram']:.4f}, trigram counts {ns['BASE']['trigram']:.4f} bits per byte on them",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        f.write("".join(f"# {line}\n" for line in header))
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
