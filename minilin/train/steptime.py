"""Training-step time of several models measured side by side: `python -m minilin train --step-time A,B,...`.

Each model gets its own optimizer (the config's AdamW groups) and the same fixed batches. Rounds interleave the
models (the order rotates every round), each round times `steps` full training steps per model (forward,
backward, clipping, AdamW step) after one untimed warm-up step, so a change of machine load between rounds hits
every model alike. Reported per model: the median ms/step over rounds with the interquartile range, and the
median over rounds of its time divided by the first model's *in the same round*, with that ratio's IQR. A
ratio whose IQR contains 1 is a tie.
"""
import statistics
import time

import torch

from minilin.model import build_model
from minilin.train.compare import check_compare, compare_configs
from minilin.train.loop import make_optimizer


def _quartiles(values):
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q2, q1, q3


def step_times(models, config, *, rounds=7, steps=5, device="cpu", data=None):
    """{name: {"ms": median, "ms_iqr": (q1, q3), "ratio": median ratio to models[0], "ratio_iqr": (q1, q3)}}.

    models: names as for compare() (an arch or a TinyLM attention); config: the shared TrainConfig (shape,
    batch size, optimizer). Ratios are per round, against the first model timed in that round.
    """
    if rounds < 1 or steps < 1:
        raise ValueError(f"rounds and steps must be at least 1, got {rounds}, {steps}")
    data = check_compare(models, config) if data is None else data
    generator = torch.Generator().manual_seed(config.seed)
    batches = [data.batch("train", config.batch_size, generator=generator, device=device) for _ in range(steps)]
    nets = {}
    for name, cfg in zip(models, compare_configs(models, config)):
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, cfg.arch).to(device).train()
        nets[name] = (model, make_optimizer(model, cfg), cfg.grad_clip)

    def one_step(name, x, y):
        model, optimizer, clip = nets[name]
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    for name in models:  # warm-up: allocator, kernels, lazy AdamW state
        one_step(name, *batches[0])
    times = {name: [] for name in models}
    ratios = {name: [] for name in models}
    for r in range(rounds):
        order = models[r % len(models):] + models[:r % len(models)]
        this_round = {}
        for name in order:
            t0 = time.perf_counter()
            for x, y in batches:
                one_step(name, x, y)
            this_round[name] = 1e3 * (time.perf_counter() - t0) / steps
        for name in models:
            times[name].append(this_round[name])
            ratios[name].append(this_round[name] / this_round[models[0]])
    out = {}
    for name in models:
        ms, q1, q3 = _quartiles(times[name])
        ratio, r1, r3 = _quartiles(ratios[name])
        out[name] = {"ms": ms, "ms_iqr": (q1, q3), "ratio": ratio, "ratio_iqr": (r1, r3)}
    return out


def format_step_times(result, models, config, rounds, steps):
    first = models[0]
    lines = [f"training step time, {rounds} interleaved rounds x {steps} steps (L={config.model.block_size}, "
             f"d={config.model.dim}, depth {config.model.depth}, heads {config.model.heads}, batch "
             f"{config.batch_size}); median [IQR]",
             f"{'model':<30}{'ms/step':>22}{'time / ' + first:>34}"]
    for name in models:
        r = result[name]
        ms = f"{r['ms']:.1f} [{r['ms_iqr'][0]:.1f}, {r['ms_iqr'][1]:.1f}]"
        lo, hi = r["ratio_iqr"]
        verdict = "" if name == first else ("  tie (IQR contains 1)" if lo <= 1 <= hi else
                                            "  faster" if hi < 1 else "  slower")
        ratio = f"{r['ratio']:.3f} [{lo:.3f}, {hi:.3f}]"
        lines.append(f"{name:<30}{ms:>22}{ratio:>34}{verdict}")
    return "\n".join(lines)
