"""Interleaved timing rounds with paired ratios: the timing loop of notebook 06, section 5.

On a shared machine other programs change the speed from one moment to the next. So every case is warmed up,
then timed in rounds: in each round every case gets one block of back-to-back calls, all cases of one length n
one after the other, a different one first in each round. Two cases timed in the same round form a *paired*
ratio, which cancels load that slows both alike; a comparison is reported as the median of those ratios and
their interquartile range. On a CPU the clock is this process's CPU time on one thread (set the thread count
with `minilin.bench.meters.torch_threads`); on a GPU it is wall time after a synchronise.
"""
import math
import time

import numpy as np
import torch

from minilin.bench.meters import OpTimes, torch_threads
from minilin.bench.methods import Tensors, attention_fn

ROUNDS, MIN_BLOCK = 10, 0.01  # notebook 06's timed rounds, and seconds of calls per block at least


def timing_clock(device):
    """The clock of the rounds: CPU time of this process on a CPU, wall time on a GPU."""
    return time.process_time if torch.device(device).type == "cpu" else time.perf_counter


def machine_balance(device, *, size=1024, copy_numel=2**24, rounds=10, min_block=0.05, clock=None):
    """This machine's peak rates: (matrix-product FLOP/s, copy bytes/s), each from its best round.

    A (size x size) @ (size x size) product, 2 size^3 FLOPs, and a copy of `copy_numel` float32 numbers, each read
    and written (8 bytes a number), timed in `interleaved_rounds` on the rounds' clock (default `timing_clock`),
    on one CPU thread on a CPU.
    """
    cuda = torch.device(device).type == "cuda"
    a, prod = torch.randn(size, size, device=device), torch.empty(size, size, device=device)
    src, dest = torch.randn(copy_numel, device=device), torch.empty(copy_numel, device=device)

    def timed(fn):
        def call():
            fn()
            if cuda:
                torch.cuda.synchronize()
        return call
    with torch_threads(None if cuda else 1):
        seconds = interleaved_rounds({("matmul", 0): timed(lambda: torch.mm(a, a, out=prod)),
                                      ("copy", 0): timed(lambda: dest.copy_(src))}, rounds=rounds,
                                     min_block=min_block, clock=clock or timing_clock(device))
    return 2 * size**3 / min(seconds["matmul", 0]), 2 * src.nbytes / min(seconds["copy", 0])


def attention_call(name, n, cfg, device):
    """A no-argument call: one no-grad forward of method `name` at length n on fixed random (B, H, N, D) inputs of
    `cfg`'s sizes, float32, synchronised on CUDA (kernels run asynchronously)."""
    make = Tensors(device, torch.float32, cfg.seed)
    fn = attention_fn(name, n, cfg, make)
    q, k, v = (make.randn(cfg.batch, cfg.heads, n, cfg.dim_head) for _ in range(3))  # (B, H, N, D)
    cuda = torch.device(device).type == "cuda"

    def call():
        with torch.no_grad():
            fn(q, k, v)
        if cuda:
            torch.cuda.synchronize()
    return call


def interleaved_rounds(calls, *, rounds=10, min_block=0.01, clock=time.process_time):
    """Time every case of `calls` ({(name, n): call}) in `rounds` interleaved rounds.

    Each call is made once untimed (page faults, kernel selection) and once timed, which sets its block: the
    number of back-to-back calls that last at least `min_block` seconds. Then in round r the cases of each n run
    one block each, in a rotated order (case (i + r) mod count first), so no case is always first or last.
    Returns {(name, n): [seconds per call in round 0, 1, ...]}.
    """
    if rounds < 1 or min_block <= 0:
        raise ValueError(f"need rounds >= 1 and min_block > 0, got rounds={rounds}, min_block={min_block}")
    number = {}
    for key, call in calls.items():
        call()
        t0 = clock()
        call()
        number[key] = max(1, math.ceil(min_block / max(clock() - t0, 1e-6)))
    samples = {key: [] for key in calls}
    for r in range(rounds):
        for n in sorted({n for _, n in calls}):
            here = [key for key in calls if key[1] == n]
            for i in range(len(here)):
                key = here[(i + r) % len(here)]
                t0 = clock()
                for _ in range(number[key]):
                    calls[key]()
                samples[key].append((clock() - t0) / number[key])
    return samples


def paired(samples, base, name, n):
    """base's time / name's time in each round at length n (above 1: name is faster)."""
    return np.asarray(samples[base, n]) / np.asarray(samples[name, n])


def spread(ratios):
    """(25th percentile, median, 75th percentile) of per-round values."""
    return tuple(float(x) for x in np.percentile(ratios, [25, 50, 75]))


def show(ratios):
    """'median [25th-75th percentile]' of per-round ratios, two significant digits."""
    lo, med, hi = spread(ratios)
    return f"{med:.2g}x [{lo:.2g}-{hi:.2g}]"


def show_range(ratios):
    """'median [lowest-highest]' of per-round ratios, two significant digits: every round inside the brackets."""
    return f"{np.median(ratios):.2g}x [{np.min(ratios):.2g}-{np.max(ratios):.2g}]"


def where_time_goes(call, *, number=3):
    """Where a CPU call's time goes: {"system share": the system's share of this process's CPU time over `number`
    calls (page faults of fresh buffers are served there), "faults per call": minor page faults per call,
    "op share": {aten operator: its share of the operators' CPU time in one more call}}. Unix only (`resource`)."""
    import resource

    def usage():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime, r.ru_minflt
    call()
    u0, s0, f0 = usage()
    for _ in range(number):
        call()
    u1, s1, f1 = usage()
    with OpTimes() as ops:
        call()
    total = sum(ops.seconds.values())
    return {"system share": (s1 - s0) / max(u1 - u0 + s1 - s0, 1e-9), "faults per call": (f1 - f0) / number,
            "op share": {op: t / total for op, t in sorted(ops.seconds.items(), key=lambda x: -x[1])}}


def time_attention(cases, cfg, device, *, rounds=ROUNDS, min_block=MIN_BLOCK):
    """Notebook 06's forward timings: {(name, n): seconds per call, one value per round} for every (name, n) of
    `cases`, in `interleaved_rounds`, with `attention_call`'s no-grad forward calls of `cfg`'s sizes. On a CPU on
    one thread (restored after), reading this process's CPU time; on a GPU wall time on torch's threads."""
    cpu = torch.device(device).type == "cpu"
    with torch_threads(1 if cpu else None):
        calls = {(name, n): attention_call(name, n, cfg, device) for name, n in cases}
        return interleaved_rounds(calls, rounds=rounds, min_block=min_block, clock=timing_clock(device))
