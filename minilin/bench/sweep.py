"""The sweep: every method at every length, measured on a device and modelled on "meta", as tidy rows.

What is benchmarked: the attention *function*, q, k, v (B, H, N, D) -> out (B, H, N, D), for every method,
ours and the peers' alike. The projections to_q/to_k/to_v/to_out cost the same O(N·dim²) for every variant,
so they are left out: the curves isolate the mixing step, which is where the variants differ (whole-model
savings, as in the Linformer paper's Table 3, are these savings diluted by the shared parts). Peers that only
ship a module (the `linformer` package) are run through their own forward on our q, k, v
(`minilin.peer_attention`). At a given n every method sees the same B, H, D, the same Linformer
proj_len and the same number of random features m (`BenchConfig`); E and F are shared by all heads (as in the
`linformer` package) and are not trained (requires_grad=False), FAVOR+ projections are fixed buffers in both
our code and performer-pytorch.

Two kinds of numbers, told apart by the CSV column `source`:
  measured  time: torch.utils.benchmark.Timer on CPU, CUDA events on GPU; warm-up calls, then up to
            `rounds` timed blocks per (method, n, pass) with all methods interleaved (so a load change hits
            every method alike), reported as the median; passes "fwd" (no_grad) and "fwdbwd" (forward + the
            gradients of q, k, v).
            saved_bytes: what autograd keeps for backward (`saved_tensors_hooks`), each storage counted once,
            inputs and constant buffers included (they are kept alive by the graph).
            On CUDA also peak_fwd_bytes / peak_fwdbwd_bytes: torch.cuda.max_memory_allocated above the
            memory held before the call (inputs and buffers).
  model     the same code on device="meta": shapes flow through every op but nothing is allocated or
            computed, so n = 65536+ costs milliseconds. It gives model_saved_bytes (same hooks),
            model_peak_*_bytes (a dispatch mode adding each new storage and subtracting it when freed) and
            model_flops_* (torch.utils.flop_counter.FlopCounterMode: matrix products only, elementwise ops
            such as exp are not counted). SDPA on meta would decompose into the math path, so the model runs
            the fused CPU flash kernel's op instead (CPU and CUDA flash kernels keep the same tensors for
            backward: q, k, v, out and a (B, H, N) logsumexp).
Too-slow and out-of-memory cases become rows with status "slow" / "oom" (value NaN) instead of crashing the
sweep: on CUDA a torch.OutOfMemoryError is caught; on CPU, where running out of memory kills the process, a
case whose *predicted* peak (model) exceeds `max_bytes` is not run. A method that was slow or out of memory
at some n is "skipped" at every larger n.
"""
import math
import os
import platform
import time
from dataclasses import dataclass, replace

import torch

from minilin.bench.meters import (block_timer, cuda_peak, free, is_oom, model_case, progress_bar, saved_tensor_bytes, sync,
                                  torch_threads, wall)
from minilin.bench.methods import (DEFAULT_METHODS, Tensors, attention_fn, case_inputs, features_of, get_method,
                                   resolve_dtype)
from minilin.bench.results import MEASURED_METRICS, MODEL_METRICS, ROUND_METRICS
from minilin.device import resolve_device

PASSES = ("fwd", "fwdbwd")


@dataclass
class BenchConfig:
    """One sweep. Defaults: 8 heads of D=64 (BERT-base's head size), batch 1, FAVOR+'s released m=256."""
    lengths: tuple = (256, 512, 1024, 2048, 4096, 8192)  # n measured on the real device
    model_lengths: tuple = None                          # n for the meta model; None: lengths doubled to 65536
    methods: tuple = None                                # names (minilin.bench.names); None: DEFAULT_METHODS
    batch: int = 1
    heads: int = 8
    dim_head: int = 64
    nb_features: int = 256                               # m for ours and performer-pytorch (unless -m<M>)
    device: str = "auto"                                 # "auto" = cuda when available, else cpu
    dtype: str = "float32"
    passes: tuple = PASSES
    min_run_time: float = 0.3    # seconds of timed calls per (method, n, pass), split over `rounds` blocks
    rounds: int = 5
    max_seconds: float = 5.0     # one call slower than this -> "slow" (and larger n skipped)
    max_bytes: int = None        # predicted peak above this -> "oom" without running; None: see resolve_max_bytes
    seed: int = 0
    threads: int = None          # CPU threads for torch during the sweep; None: leave torch's setting
    progress: bool = True        # a tqdm bar on stderr (TQDM_DISABLE=1 also turns it off)


def resolve_max_bytes(cfg, device):
    """The memory a case may be predicted to need. CPU default: a quarter of physical RAM (others share it)."""
    if cfg.max_bytes is not None:
        return cfg.max_bytes
    if device.type == "cuda":
        return None  # try, and catch torch.OutOfMemoryError
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 16 GB of RAM
        return 4 * 2**30


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def default_model_lengths(lengths, upto=65536):
    """The measured lengths, then doubling past the largest up to `upto` (the meta model is cheap)."""
    out = sorted(set(lengths))
    while out and out[-1] * 2 <= upto:
        out.append(out[-1] * 2)
    return tuple(out)


class _Case:
    """One (method, n) on the real device: inputs, the two callables, and their timings."""

    def __init__(self, method, n, cfg, device, dtype):
        make = Tensors(device, dtype, cfg.seed)
        self.method, self.n = method, n
        fn = attention_fn(method, n, cfg, make)
        q, k, v = case_inputs(cfg, n, make, requires_grad=True)
        grad_out = make.randn(*q.shape)

        def fwd():
            with torch.no_grad():
                return fn(q, k, v)

        def fwdbwd():
            return torch.autograd.grad(fn(q, k, v), (q, k, v), grad_out)

        self.calls = {"fwd": fwd, "fwdbwd": fwdbwd}
        self.fn, self.inputs, self.grad_out = fn, (q, k, v), grad_out
        self.rounds, self.number, self.timers, self.times = {}, {}, {}, {}
        self.failure = None


class _TooSlow(Exception):
    def __init__(self, pass_name, seconds):
        super().__init__(pass_name, seconds)
        self.pass_name, self.seconds = pass_name, seconds


def run(cfg=None, **overrides):
    """Run a sweep; returns tidy rows (dicts with minilin.bench.results.CSV_COLUMNS): method × n × metric."""
    cfg = replace(cfg or BenchConfig(), **overrides)
    with torch_threads(cfg.threads):
        return _run(cfg)


def _run(cfg):
    device, dtype = resolve_device(cfg.device), resolve_dtype(cfg.dtype)
    max_bytes = resolve_max_bytes(cfg, device)
    methods = [get_method(m) for m in (cfg.methods or DEFAULT_METHODS)]
    lengths = sorted(set(cfg.lengths))
    model_lengths = sorted(set(cfg.model_lengths or default_model_lengths(lengths)) | set(lengths))
    for name in cfg.passes:
        if name not in PASSES:
            raise ValueError(f"passes must be 'fwd' and/or 'fwdbwd', got {name!r}")
    common = {"device": device.type, "device_name": device_name(device), "dtype": cfg.dtype,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "batch": cfg.batch,
              "heads": cfg.heads, "dim_head": cfg.dim_head}
    rows = []

    def add(method, n, metric, value, source, status="ok", note=""):
        unit = {**MEASURED_METRICS, **MODEL_METRICS, **ROUND_METRICS}[metric]
        rows.append({"method": method.name, "n": n, "metric": metric,
                     "value": float(value) if status == "ok" else math.nan, "unit": unit, "source": source,
                     "status": status, "note": note, **common, "proj_len": method.proj_len or "",
                     "nb_features": features_of(method, cfg), "causal": method.causal})

    measured_names = [f"time_{p}" for p in cfg.passes] + ["saved_bytes"]
    if device.type == "cuda":
        measured_names += [f"peak_{p}_bytes" for p in cfg.passes]
    stopped = {}  # method name -> note once it was slow / out of memory
    # one step per model case and per timing round of a measured length: the rounds are most of the time
    bar = progress_bar(len(model_lengths) * len(methods) + len(lengths) * cfg.rounds, desc="bench",
                       enabled=cfg.progress)
    for n in model_lengths:
        cases = []
        for method in methods:
            bar.set_postfix_str(f"{method.name} n={n}")
            model = model_case(method, n, cfg)
            for metric, value in model.items():
                add(method, n, metric, value, "model")
            bar.update()
            if n not in lengths:
                continue

            def mark(status, note):
                for metric in measured_names:
                    add(method, n, metric, math.nan, "measured", status, note)

            if method.name in stopped:
                mark("skipped", stopped[method.name])
                continue
            predicted = model["model_peak_fwdbwd_bytes"] if "fwdbwd" in cfg.passes else model["model_peak_fwd_bytes"]
            if max_bytes is not None and predicted > max_bytes:
                note = f"predicted peak {predicted / 2**30:.3g} GiB > limit {max_bytes / 2**30:.3g} GiB"
                mark("oom", note)
                stopped[method.name] = f"{note} at n={n}"
                continue
            case = _prepare(method, n, cfg, device, dtype, add)
            if isinstance(case, _Case):
                cases.append(case)
                continue
            status, note = case  # measurements taken before the failure are kept
            done = {r["metric"] for r in rows if r["method"] == method.name and r["n"] == n
                    and r["source"] == "measured"}
            for metric in measured_names:
                if metric not in done:
                    add(method, n, metric, math.nan, "measured", status, note)
            stopped[method.name] = f"{note} at n={n}"
            free(device)
        if n in lengths:
            bar.set_postfix_str(f"timing {len(cases)} methods at n={n}")
            _time_interleaved(cases, cfg, device, bar)
        for case in cases:
            for p in cfg.passes:
                if case.failure is not None:
                    add(case.method, n, f"time_{p}", math.nan, "measured", "oom", case.failure)
                    stopped[case.method.name] = f"{case.failure} at n={n}"
                    continue
                times = sorted(case.times[p])
                add(case.method, n, f"time_{p}", times[len(times) // 2], "measured",
                    note=f"median of {len(times)} blocks of {case.number[p]} calls")
                for r, t in enumerate(case.times[p]):  # block r was timed in interleaved round r
                    add(case.method, n, f"time_{p}_round", t, "measured", note=f"round {r}")
        del cases
        free(device)
    bar.close()
    return rows


def _prepare(method, n, cfg, device, dtype, add):
    """Warm one case up and size its timing blocks; the _Case, or (status, note) when it is slow / out of memory.

    Warm-up, cheapest first so that a hopeless case stops early: a no_grad forward, then the forward with
    autograd that measures the saved bytes, then its backward (the fwdbwd warm-up).
    """
    try:
        case = _Case(method, n, cfg, device, dtype)
        warm = {"fwd": wall(case.calls["fwd"], device)}  # first call: page faults, kernel selection
        if warm["fwd"] > 4 * cfg.max_seconds:
            raise _TooSlow("fwd", warm["fwd"])
        sync(device)
        t0 = time.perf_counter()
        saved, out = saved_tensor_bytes(case.fn, *case.inputs)
        add(method, n, "saved_bytes", saved, "measured")
        if "fwdbwd" in cfg.passes:
            torch.autograd.grad(out, case.inputs, case.grad_out)
            sync(device)
            warm["fwdbwd"] = time.perf_counter() - t0
        out = None
        for p in cfg.passes:
            if warm[p] > 4 * cfg.max_seconds:
                raise _TooSlow(p, warm[p])
            once = min(warm[p], wall(case.calls[p], device))  # decides "slow" and the block size; the min of
            if once > cfg.max_seconds:                         # two calls, so one descheduling does not decide
                raise _TooSlow(p, once)
            # fast calls: `rounds` blocks of many calls; slow ones: fewer blocks of one call
            case.rounds[p] = min(cfg.rounds, max(1, int(cfg.min_run_time / max(once, 1e-7))))
            case.number[p] = max(1, int(cfg.min_run_time / case.rounds[p] / max(once, 1e-7)))
            case.timers[p] = block_timer(case.calls[p], device)
            case.times[p] = []
            if device.type == "cuda":
                add(method, n, f"peak_{p}_bytes", cuda_peak(case.calls[p], device), "measured")
        return case
    except _TooSlow as err:
        return "slow", f"one {err.pass_name} call took {err.seconds:.3g} s > limit {cfg.max_seconds:.3g} s"
    except (RuntimeError, MemoryError) as err:
        if not is_oom(err):
            raise
        return "oom", f"out of memory: {str(err).splitlines()[0][:120]}"


def _time_interleaved(cases, cfg, device, bar):
    """Every round visits every case, starting at a different one each time, so load changes hit all alike."""
    for r in range(cfg.rounds):
        for i in range(len(cases)):
            case = cases[(i + r) % len(cases)]
            for p in cfg.passes:
                if r < case.rounds[p] and case.failure is None:
                    try:
                        case.times[p].append(case.timers[p](case.number[p]))
                    except (RuntimeError, MemoryError) as err:  # CUDA: fragmentation can still bite
                        if not is_oom(err):
                            raise
                        case.failure = f"out of memory while timing: {str(err).splitlines()[0][:100]}"
                        free(device)
        bar.update()
