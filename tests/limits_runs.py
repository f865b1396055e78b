"""Train notebook 08's learning-rate grids on three seeds; write results/reference/limits_{copy,recall}.csv.

    python tests/limits_runs.py copy                      # every copy contender x grid x seed (about 50 CPU-minutes)
    python tests/limits_runs.py recall                    # associative recall at each number of pairs
    python tests/limits_runs.py copy-fixes                # exact with learned positions; selection drift; k=16 over spans
    python tests/limits_runs.py copy-edges                # one more lr where a copy best point sat on the grid's edge
    python tests/limits_runs.py recall-scattered          # recall, pairs at random places, small state, uniform baseline
    python tests/limits_runs.py recall-gated              # notebook 09: retention, GLA, DeltaNet, Gated DeltaNet
    python tests/limits_runs.py recall-small              # notebook 09: every recall model with heads of 8 dims
    python tests/limits_runs.py recall-low-lr             # notebook 09: its recall models at lr 1e-3 too
    python tests/limits_runs.py copy --shard 0/2 --out /tmp/c0.csv    # half of the runs (run 1/2 beside it)
    python tests/limits_runs.py merge results/reference/limits_copy.csv /tmp/c0.csv /tmp/c1.csv

Every run is `minilin.limits.run`, the function notebook 08 calls for its live runs. One CSV row per evaluation
(the learning curve), and for each trained exact copy model the accuracy with its attention cut to rank r and
with the selection oracle (softmax over the first k keys: Linformer with E = F = [I_k | 0] set by hand).
Every model trains with AdamW, warm-up and a cosine schedule at each rate of its grid (`limits.LRS`); the `fan_in`
Linformers' grid also trains E, F at ten times lr 0.003 (`ef_lr_scale = 10`). Where a Linformer's best point (highest
mean final validation accuracy) sat on the edge of its grid, `copy-edges` trains one more rate beyond it
(limits_copy_edges.csv); the exact models' grids were not extended past their edges.
The file opens with `# key: value` lines: command, machine, date, sizes. Read with pandas.read_csv(comment="#").
"""
from __future__ import annotations

import argparse
import csv
import re
import shlex
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minilin import limits  # noqa: E402
from minilin.train.compare import machine_line  # noqa: E402

FIELDS = ("task", "model", "lr", "ef_lr_scale", "seed", "measure", "r", "step", "val_acc", "params", "train_s")
SEEDS = (0, 1, 2)
RANKS = (8, 16, 32, 48, 63)      # rank cuts of the exact copy model (63 = the span)
ORACLE_KS = (32, 48, 63, 64)     # selection oracles


def runs(task_name):
    if task_name == "copy":
        task = limits.copy_task()
        return [(task, limits.COPY, c, lr, ef, seed) for seed in SEEDS for c in limits.copy_contenders()
                for lr, ef in c.grid]
    if task_name == "copy-fixes":
        task = limits.copy_task()
        out = [(task, limits.COPY, c, lr, ef, seed) for c in (limits.EXACT_LEARNED, limits.EXACT_DEEP)
               for lr, ef in c.grid for seed in SEEDS]
        sel = next(c for c in limits.copy_contenders() if c.name == "Linformer k=64, selection init")
        out += [(task, limits.COPY, sel, lr, ef, seed) for lr, ef in sel.grid for seed in SEEDS]
        for span in limits.SWEEP["spans"]:
            if span != limits.COPY["span"]:   # the full-rank reference at every span of the sweep, at the sweep's lr
                out += [(limits.copy_task(span), limits.COPY, limits.EXACT_DEEP, limits.SWEEP["lr"], 1.0, seed)
                        for seed in SEEDS]
            for c in limits.sweep_contenders():
                if span == limits.COPY["span"] and c.init == "default":
                    continue        # the same computation as limits_copy.csv's Linformer k=16 at lr 3e-3
                out += [(limits.copy_task(span), limits.COPY, c, lr, ef, seed) for lr, ef in c.grid for seed in SEEDS]
        return out
    if task_name == "copy-edges":
        task = limits.copy_task()
        return [(task, limits.COPY, c, lr, ef, seed) for c in limits.edge_points() for lr, ef in c.grid for seed in SEEDS]
    if task_name == "recall-scattered":
        return [(limits.scattered_recall_task(p), limits.RECALL_HARD, c, lr, ef, seed)
                for p in limits.RECALL_HARD["pairs"] for c in limits.scattered_recall_contenders()
                for lr, ef in c.grid for seed in SEEDS]
    out = []
    contenders = {"recall-gated": limits.gated_recall_contenders,
                  "recall-small": limits.small_state_recall_contenders,
                  "recall-low-lr": limits.low_lr_recall_contenders}.get(task_name, limits.recall_contenders)()
    for pairs in limits.RECALL["pairs"]:
        task = limits.recall_task(pairs)
        out += [(task, limits.RECALL, c, lr, ef, seed) for seed in SEEDS for c in contenders for lr, ef in c.grid]
    return out


def write_header(path, lines):
    with open(path, "w", newline="") as f:
        f.writelines(f"# {line}\n" for line in lines)
        csv.writer(f).writerow(FIELDS)


def append(path, rows):
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        for row in rows:
            w.writerow({k: row.get(k, "") for k in FIELDS})


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["merge"]:
        if len(argv) < 3:
            sys.exit("usage: limits_runs.py merge OUT PART [PART ...]")
        out, parts = Path(argv[1]), [Path(p) for p in argv[2:]]
        head, body, seen = [], [], set()
        for k, p in enumerate(parts, 1):  # a run in several parts keeps its first part's rows (a later part may add measures)
            lines = p.read_text().splitlines()
            head += [f"part {k}: " + re.sub(r" --out \S+", "", line[2:]) for line in lines if line.startswith("# ")]
            rows = list(csv.DictReader([line for line in lines if not line.startswith("#")]))
            for row in rows:
                key = tuple(row[f] for f in FIELDS if f not in ("params", "train_s", "val_acc"))
                if key not in seen:
                    seen.add(key)
                    body.append(row)
        head.append(f"merged: {len(parts)} parts with python tests/limits_runs.py merge")
        with out.open("w", newline="") as f:
            f.writelines(f"# {line}\n" for line in head)
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(body)
        print(f"{out}: {len(body)} rows from {len(parts)} parts")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=("copy", "copy-fixes", "copy-edges", "recall-scattered", "recall", "recall-gated", "recall-small", "recall-low-lr"))
    parser.add_argument("--shard", default="0/1", help="i/n: run every n-th run starting at i")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--models", help="only these runs: 'name' or 'name@lr', separated by '|'")
    args = parser.parse_args(argv)
    i, n = (int(x) for x in args.shard.split("/"))
    out = args.out or ROOT / "results" / "reference" / f"limits_{args.task.replace('-', '_')}.csv"
    torch.set_num_threads(1)
    todo = [r for j, r in enumerate(runs(args.task)) if j % n == i]
    if args.models:
        wanted = args.models.split("|")
        todo = [r for r in todo if r[2].name in wanted or f"{r[2].name}@{r[3]:g}" in wanted]
    sizes = {"recall-scattered": limits.RECALL_HARD}.get(args.task, limits.COPY if "copy" in args.task else limits.RECALL)
    write_header(out, [f"command: python tests/limits_runs.py {' '.join(shlex.quote(a) for a in argv)}",
                       f"machine: {machine_line()}", f"date: {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
                       f"sizes: {sizes}; model {limits.MODEL}; seeds {SEEDS}; runs {len(todo)}"])
    for task, sz, c, lr, ef, seed in todo:
        t0 = time.perf_counter()
        h = limits.run(c, task, sz, lr=lr, ef_lr_scale=ef, seed=seed)
        rows = limits.curve_rows(h, c, task.name, lr=lr, ef_lr_scale=ef, seed=seed)
        for row in rows:
            row["measure"] = "val_acc"
        if c.init == "selection":
            last = dict(rows[-1])
            rows += [{**last, "measure": f"drift_{name}", "val_acc": round(d, 4)}
                     for name, d in zip("EF", limits.ef_drift(h.model, h.ef_start))]
        if args.task == "copy" and c.name == "exact":
            last = dict(rows[-1])
            rows += [{**last, "measure": "rank_cut", "r": r, "val_acc": round(limits.score(h.model, task,
                      mix=limits.rank_cut(r)), 4)} for r in RANKS]
            rows += [{**last, "measure": "selection_oracle", "r": k, "val_acc": round(limits.score(h.model, task,
                      mix=limits.selection_oracle(k)), 4)} for k in ORACLE_KS]
            rows.append({**last, "measure": "score", "val_acc": round(limits.score(h.model, task), 4)})
        if "copy" in args.task and c.init == "selection" and c.proj_len >= task.span_len and c.grid[0][1] > 0:
            attn, last = h.model.blocks[0].attn, dict(rows[-1])
            rows += [{**last, "measure": "rank_cut", "r": r, "val_acc": round(limits.score(h.model, task,
                      mix=limits.rank_cut(r, attn)), 4)} for r in RANKS]
            rows.append({**last, "measure": "ideal_copy", "r": task.span_len, "val_acc": round(limits.score(
                h.model, task, mix=limits.ideal_copy(attn, task.span_len)), 4)})
            rows.append({**last, "measure": "score", "val_acc": round(limits.score(h.model, task), 4)})
        append(out, rows)
        print(f"{task.name:32s} {c.name:34s} lr {lr:g} ef {ef:g} seed {seed}: acc {h.val_acc[-1]:.3f} "
              f"{'drift ' + str([round(d, 3) for d in limits.ef_drift(h.model, h.ef_start)]) if h.ef_start else ''} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
