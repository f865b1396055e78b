"""Train notebook 08's section-2 Linformers longer; write results/reference/limits_copy_long.csv.

    python tests/limits_copy_long.py --probe                 # k = 16, 32, 64, selection start, lr 3e-3, 1200 steps
    python tests/limits_copy_long.py --steps 1200 --seeds 0 1 2 --ks 16 32 64
    python tests/limits_copy_long.py --ks 16 --lr 0.01 --decode --probe --out results/reference/limits_copy_long_lr1e-2.csv
    python tests/limits_copy_long.py --ks 16 --lr 0.01 --dim-head 8 --out /tmp/dh8.csv   # narrower heads
    python tests/limits_copy_long.py --ks 16 --alphabet 52 --out results/reference/limits_copy_alphabet52.csv

Notebook 08 trains Linformers from the selection start at k = 16, 32, 64 for 400 steps (limits_copy_fixes.csv) and
sets them (controls appendix) beside the trained k = 64 model with its map cut per head to rank r. At 400 steps the k = 16 and 32 curves
are still rising, so this script trains the same runs (`minilin.limits.run`, the same contenders, lr and seeds,
only `steps` changed) for longer, and cuts the longer k = 64 model's map per head to rank r too. With --decode, each
trained model below k = S also gets section 5's argmax decode of its own map (`limits.map_decode`, 32 validation inputs,
generator seed 7): rows with measure decode_head0, decode_head1 and decode_sum (the two heads summed).
With --probe, each trained model below k = S is also scored (`limits.score`) with its layer's A = softmax(q (EK)^T) or
F V taken from another input of the batch (probe_A_other, probe_FV_other), A replaced by its batch mean (probe_A_mean),
and F's columns outside the span or inside it set to 0 (probe_F_span_only, probe_F_rest_only): notebook 08, section 5.
With --dim-head d, every head has d dimensions instead of MODEL's 32 (so d_v = d), and the model's name ends ", d_h=d":
notebook 08's width check (limits_copy_width.csv), where all a rank-k head passes on is the k x d_v numbers of F V.
With --alphabet A, the span's letters are drawn from A letters instead of 16 and the model's name ends ", alphabet=A":
notebook 08's controls appendix (limits_copy_alphabet52.csv), a copy whose letters outnumber k.
Same columns as tests/limits_runs.py; the file opens with `# key: value` lines: command, machine, date, sizes, and
each run's wall time is in `train_s`. Read with pandas.read_csv(comment="#").
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dataclasses import replace  # noqa: E402

import torch  # noqa: E402

from limits_runs import append, write_header  # noqa: E402
from minilin import limits  # noqa: E402
from minilin.attention import attention_matrix  # noqa: E402
from minilin.data import SpanCopy  # noqa: E402
from minilin.train.compare import machine_line  # noqa: E402

RANKS = (16, 32, 63)       # per-head rank cuts of the longer k = 64 model


def probes(model, span):
    """{measure: mixing step} for section 5's probes of a trained one-block Linformer: A or F V from another input of
    the batch, A its batch mean, F's columns outside (inside) the span set to 0."""
    attn = model.blocks[0].attn
    other = lambda t: t.roll(1, 0)

    def mixer(change_a=lambda a: a, change_fv=lambda fv: fv, keep=None):
        def mix(q, k, v, *, mask=None, causal=False):
            E, F = attn.projections(k.shape[-2])                       # (k, n) each
            if keep is not None:
                F = F * (keep == (torch.arange(F.shape[-1], device=F.device) < span))
            return change_a(attention_matrix(q, E @ k)) @ change_fv(F @ v)
        return mix

    return {"probe_A_other": mixer(change_a=other), "probe_FV_other": mixer(change_fv=other),
            "probe_A_mean": mixer(change_a=lambda a: a.mean(0, keepdim=True).expand_as(a)),
            "probe_F_span_only": mixer(keep=True), "probe_F_rest_only": mixer(keep=False)}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--ks", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--lr", type=float, default=None, help="default: the sweep's rate, limits.SWEEP['lr']")
    p.add_argument("--decode", action="store_true", help="add the argmax decode of each k < S model's own map")
    p.add_argument("--probe", action="store_true", help="add section 5's probes of each k < S model")
    p.add_argument("--dim-head", type=int, default=None, help="heads of this many dimensions (default: MODEL's 32)")
    p.add_argument("--alphabet", type=int, default=None, help="letters in the span (default: COPY's 16)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "reference" / "limits_copy_long.csv")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    task, lr = limits.copy_task(), (limits.SWEEP["lr"] if args.lr is None else args.lr)
    sizes = {**limits.COPY, "steps": args.steps, "eval_every": 100}
    if args.alphabet is not None:
        task = SpanCopy(seq_len=task.seq_len, span_len=task.span_len, alphabet=args.alphabet)
        sizes["alphabet"] = args.alphabet
    by_name = {c.name: c for c in (*limits.copy_contenders(ks=(), selection_ks=(32, 64)), *limits.sweep_contenders())}
    todo = [(by_name[f"Linformer k={k}, selection init"], seed) for seed in args.seeds for k in args.ks]
    if args.dim_head is not None:
        todo = [(replace(c, name=f"{c.name}, d_h={args.dim_head}", shape=(*c.shape, ("dim_head", args.dim_head))), seed)
                for c, seed in todo]
    if args.alphabet is not None:
        todo = [(replace(c, name=f"{c.name}, alphabet={args.alphabet}"), seed) for c, seed in todo]
    write_header(args.out, [f"command: python tests/limits_copy_long.py {' '.join(shlex.quote(a) for a in argv)}",
                            f"machine: {machine_line()}", f"date: {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
                            f"sizes: {sizes}; model {limits.MODEL}; lr {lr}; seeds {tuple(args.seeds)}; "
                            f"ks {tuple(args.ks)}; dim_head {args.dim_head or 'default'}; runs {len(todo)}"])
    for c, seed in todo:
        t0 = time.perf_counter()
        h = limits.run(c, task, sizes, lr=lr, seed=seed)
        rows = limits.curve_rows(h, c, task.name, lr=lr, ef_lr_scale=1.0, seed=seed)
        for row in rows:
            row["measure"] = "val_acc"
        if c.proj_len >= task.span_len:
            attn, last = h.model.blocks[0].attn, dict(rows[-1])
            rows += [{**last, "measure": "rank_cut", "r": r, "val_acc": round(limits.score(h.model, task,
                      mix=limits.rank_cut(r, attn)), 4)} for r in RANKS]
        if args.decode and c.proj_len < task.span_len:
            x, _ = task.batch("val", 32, generator=torch.Generator().manual_seed(7))
            decoded = limits.map_decode(h.model, x, task.span_len)
            rows += [{**rows[-1], "measure": f"decode_{m}", "val_acc": round(d, 4)}
                     for m, d in zip(("head0", "head1", "sum"), decoded)]
        if args.probe and c.proj_len < task.span_len:
            rows += [{**rows[-1], "measure": m, "val_acc": round(limits.score(h.model, task, mix=mix), 4)}
                     for m, mix in probes(h.model, task.span_len).items()]
        append(args.out, rows)
        print(f"{c.name:34s} seed {seed}: acc {h.val_acc[-1]:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
