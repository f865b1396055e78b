"""Train notebook 03's denoising comparison to a plateau; write results/reference/linformer_denoise.json.

    python tests/linformer_runs.py                                   # every model x learning rate x seed
    python tests/linformer_runs.py --shard 0/2 --out /tmp/l0.json    # half of the runs (run 1/2 beside it)
    python tests/linformer_runs.py merge results/reference/linformer_denoise.json /tmp/l0.json /tmp/l1.json
    python tests/linformer_runs.py probe                             # results/reference/linformer_probe.json

Every run is `minilin.denoise.train_denoiser`'s loop (the same seeding, data order and AdamW), written out here
so that the held-out MSE can be read along the way: its first steps are the ones the notebook's live run
repeats. Models: exact attention, Linformer with k = 4, 8, 16 (headwise sharing, fan_in E, F), fixed mean
pooling with k = 8 rescaled to the learned E's key scale (the notebook's matched-pooling control), and the same
block with attention switched off (it outputs zeros). Each at two learning rates and three seeds.

For each trained Linformer the file also holds a linear probe: least squares from the slot vectors of the
block (E Z and F Z, Z the block's normalised input, flattened) to the 8 coefficients of the clean signal (the
sine and cosine amplitude of 1-4 cycles), fitted on 2048 training signals and scored (R^2) on the 256 held-out
signals; the same before training.

`probe` retrains the Linformers at learning rate 1e-2 on the three seeds and splits the probe along the way: from
the value slots F Z alone, from the key slots E Z alone, and from both (results/reference/linformer_probe.json).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minilin.attention import MultiHeadSelfAttention  # noqa: E402
from minilin.denoise import TEST_SEED, Denoiser, held_out_mse, smooth_signal_batch  # noqa: E402
from minilin.linformer import LinformerSelfAttention  # noqa: E402
from minilin.train.compare import machine_line  # noqa: E402

N, BATCH, LAYERS, STEPS = 128, 32, 1, 2000
SEEDS = (0, 1, 2)
LRS = (1e-2, 3e-3)              # 1e-2 first: the notebook's live run uses it
EVAL_AT = (0, 10, 25, 50, 100, 150, 200, 300, 400, 500, 750, 1000, 1250, 1500, 1750, 2000)
MODELS = ("exact", "Linformer k=4", "Linformer k=8", "Linformer k=16", "Linformer k=8, matched pooling",
          "attention off")


class AttentionOff(nn.Module):
    """The block's attention switched off: it adds nothing, so each position is processed on its own."""

    def forward(self, x, *, mask=None, causal=False):
        return torch.zeros_like(x)



def train_step(model, opt, data):
    """One Adam step on a fresh batch of BATCH noisy signals (MSE to the clean ones); the loss, as a float."""
    x, y = smooth_signal_batch(BATCH, N, data)
    loss = (model(x) - y).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()

def key_scale(model, x):
    """Var(E K) / Var(K) of the first block's keys for inputs x (the notebook's matched-pooling rule)."""
    a = model.blocks[0].attn
    with torch.no_grad():
        K0 = a.split_heads(a.to_k(model.blocks[0].ln1(model.embed(x))))
        E0, _ = a.projections(N)
        return float((E0 @ K0).var() / K0.var())


def pooling_match(x_test):
    """The factor that gives mean pooling (k = 8) the mean over SEEDS of the learned E's key scale at init."""
    lin = lambda d, h: LinformerSelfAttention(d, h, seq_len=N, proj_len=8)
    pool = lambda d, h: LinformerSelfAttention(d, h, seq_len=N, proj_len=8, projection="mean")
    scales = {}
    for name, make in (("learned", lin), ("pool", pool)):
        out = []
        for s in SEEDS:
            torch.manual_seed(s)
            out.append(key_scale(Denoiser(N, make, layers=LAYERS), x_test))
        scales[name] = sum(out)
    return math.sqrt(scales["learned"] / scales["pool"])


def maker(name, match):
    if name == "exact":
        return lambda d, h: MultiHeadSelfAttention(d, h)
    if name == "attention off":
        return lambda d, h: AttentionOff()
    if name == "Linformer k=8, matched pooling":
        def make(d, h):
            attn = LinformerSelfAttention(d, h, seq_len=N, proj_len=8, projection="mean")
            attn.E.mul_(match)
            return attn
        return make
    k = int(name.split("k=")[1])
    return lambda d, h: LinformerSelfAttention(d, h, seq_len=N, proj_len=k)


def coefficients(y):
    """(B, 8): the cosine and sine amplitudes of 1-4 cycles per window of the clean signals y (B, n)."""
    c = torch.fft.rfft(y.double(), dim=-1)[:, 1:5] * (2 / y.shape[-1])
    return torch.cat([c.real, c.imag], dim=-1)


def slot_features(model, x, which="both"):
    """(B, 2 k 32): the slot vectors E Z and F Z of the first block, flattened (Z: its normalised input);
    which="keys" gives E Z only, "values" F Z only."""
    a = model.blocks[0].attn
    with torch.no_grad():
        z = model.blocks[0].ln1(model.embed(x))                       # (B, n, 32)
        E, F = a.projections(N)
        E, F = (P if P.ndim == 2 else P.mean(0) for P in (E, F))      # headwise: (k, n)
        parts = {"keys": [E @ z], "values": [F @ z], "both": [E @ z, F @ z]}[which]
        return torch.cat([p.flatten(1) for p in parts], dim=-1).double()


def probe_r2(model, fit, test, which="both"):
    """R^2 on the held-out signals of the least-squares map (with a bias) from the slot vectors to the 8
    coefficients, fitted on `fit`."""
    (xf, yf), (xt, yt) = fit, test
    A = torch.cat([slot_features(model, xf, which), torch.ones(len(xf), 1, dtype=torch.float64)], -1)
    At = torch.cat([slot_features(model, xt, which), torch.ones(len(xt), 1, dtype=torch.float64)], -1)
    W = torch.linalg.lstsq(A, coefficients(yf), driver="gelsd").solution
    ct = coefficients(yt)
    return float(1 - ((At @ W - ct) ** 2).sum() / ((ct - ct.mean(0)) ** 2).sum())


def run(name, lr, seed, match, fit, test):
    """train_denoiser's loop with the held-out MSE at EVAL_AT; the probe for Linformers."""
    torch.manual_seed(seed)
    data = torch.Generator().manual_seed(seed)
    model = Denoiser(N, maker(name, match), layers=LAYERS)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    row = {"model": name, "lr": lr, "seed": seed, "steps": [], "test_mse": [], "train_mse": []}
    linformer = isinstance(model.blocks[0].attn, LinformerSelfAttention)
    if linformer:
        row["probe_r2_init"] = probe_r2(model, fit, test)
    losses, start = [], time.perf_counter()
    for step in range(STEPS + 1):
        if step in EVAL_AT:
            row["steps"].append(step)
            row["test_mse"].append(held_out_mse(model, N))
            recent = losses[-min(len(losses), 50):]
            row["train_mse"].append(sum(recent) / len(recent) if recent else None)
        if step == STEPS:
            break
        losses.append(train_step(model, opt, data))
    row["first_losses"] = losses[:10]
    row["train_s"] = round(time.perf_counter() - start, 1)
    if linformer:
        row["probe_r2"] = probe_r2(model, fit, test)
    return row


PROBE_AT = (0, 100, 200, 500, 1000, 2000)


def probe_runs(out):
    """Linformer k = 4, 8, 16 at lr 1e-2, three seeds: held-out MSE and the split probe at PROBE_AT."""
    torch.set_num_threads(1)
    test = smooth_signal_batch(256, N, torch.Generator().manual_seed(TEST_SEED))
    fit = smooth_signal_batch(2048, N, torch.Generator().manual_seed(1))
    doc = {"command": "python tests/linformer_runs.py probe", "machine": machine_line(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
           "config": {"n": N, "batch": BATCH, "layers": LAYERS, "lr": 1e-2, "seeds": SEEDS, "probe_at": PROBE_AT,
                      "held_out": f"256 signals, generator seed {TEST_SEED}", "probe_fit": "2048 signals, seed 1"},
           "runs": []}
    for k in (4, 8, 16):
        for seed in SEEDS:
            torch.manual_seed(seed)
            data = torch.Generator().manual_seed(seed)
            model = Denoiser(N, maker(f"Linformer k={k}", None), layers=LAYERS)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            row = {"model": f"Linformer k={k}", "seed": seed, "steps": [], "test_mse": [],
                   "probe_r2": {w: [] for w in ("values", "keys", "both")}}
            for step in range(PROBE_AT[-1] + 1):
                if step in PROBE_AT:
                    row["steps"].append(step)
                    row["test_mse"].append(held_out_mse(model, N))
                    for w in row["probe_r2"]:
                        row["probe_r2"][w].append(probe_r2(model, fit, test, w))
                if step == PROBE_AT[-1]:
                    break
                train_step(model, opt, data)
            doc["runs"].append(row)
            print(row["model"], seed, row["test_mse"][-1], {w: round(v[-1], 3) for w, v in row["probe_r2"].items()},
                  flush=True)
            Path(out).write_text(json.dumps(doc, indent=1) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shard", default="0/1")
    p.add_argument("--out", default=str(ROOT / "results/reference/linformer_denoise.json"))
    p.add_argument("--lrs", default=",".join(map(str, LRS)), help="comma-separated subset of the learning rates")
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "merge":
        out, parts = argv[1], argv[2:]
        merged = json.loads(Path(parts[0]).read_text())
        for part in parts[1:]:
            merged["runs"] += json.loads(Path(part).read_text())["runs"]
        merged["command"] = "python tests/linformer_runs.py --shard i/" + str(len(parts)) + " (merged)"
        merged["runs"].sort(key=lambda r: (MODELS.index(r["model"]), LRS.index(r["lr"]), r["seed"]))
        Path(out).write_text(json.dumps(merged, indent=1) + "\n")
        return
    if argv and argv[0] == "probe":
        probe_runs(argv[1] if len(argv) > 1 else ROOT / "results/reference/linformer_probe.json")
        return
    args = p.parse_args(argv)
    i, m = (int(s) for s in args.shard.split("/"))
    torch.set_num_threads(1)
    test = smooth_signal_batch(256, N, torch.Generator().manual_seed(TEST_SEED))
    fit = smooth_signal_batch(2048, N, torch.Generator().manual_seed(1))
    match = pooling_match(test[0])
    lrs = [float(x) for x in args.lrs.split(",")]
    jobs = [(lr, name, seed) for lr in lrs for name in MODELS for seed in SEEDS][i::m]
    doc = {"command": "python tests/linformer_runs.py " + " ".join(argv), "machine": machine_line(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
           "config": {"n": N, "batch": BATCH, "layers": LAYERS, "steps": STEPS, "seeds": SEEDS, "lrs": LRS,
                      "eval_at": EVAL_AT, "optimizer": "AdamW (torch defaults, weight decay 0.01)",
                      "held_out": f"256 signals, generator seed {TEST_SEED}", "probe_fit": "2048 signals, seed 1",
                      "pooling_match": match},
           "runs": []}
    for lr, name, seed in jobs:
        doc["runs"].append(run(name, lr, seed, match, fit, test))
        r = doc["runs"][-1]
        print(f"{name:32s} lr {lr:g} seed {seed}: test MSE {r['test_mse'][-1]:.4f} ({r['train_s']} s)", flush=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
