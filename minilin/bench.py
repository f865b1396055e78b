"""Time, memory and FLOP curves for every attention variant; `python -m minilin bench` is its command line.

What is benchmarked: the attention *function*, q, k, v (B, H, N, D) -> out (B, H, N, D), for every method,
ours and the peers' alike. The projections to_q/to_k/to_v/to_out cost the same O(N·dim²) for every variant,
so they are left out: the curves isolate the mixing step, which is where the variants differ (whole-model
savings, as in the Linformer paper's Table 3, are these savings diluted by the shared parts). Peers that only
ship a module (the `linformer` package) are run through their own forward on our q, k, v (`_peer_linformer`).
At a given n every method sees the same B, H, D, the same Linformer k and the same number of random features
m (`BenchConfig`); E and F are shared by all heads (as in the `linformer` package) and are not trained
(requires_grad=False), FAVOR+ projections are fixed buffers in both our code and performer-pytorch.

Three kinds of numbers, told apart by the CSV column `source`:
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
import argparse
import contextlib
import gc
import io
import math
import os
import platform
import re
import time
import warnings
import weakref
from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from minilin.attention import softmax_attention

CSV_COLUMNS = ("method", "n", "metric", "value", "unit", "source", "status", "note", "device", "device_name",
               "dtype", "torch", "threads", "batch", "heads", "dim_head", "k", "nb_features", "causal")
STATUSES = ("ok", "slow", "oom", "skipped")
MEASURED_METRICS = {"time_fwd": "s", "time_fwdbwd": "s", "saved_bytes": "B",
                    "peak_fwd_bytes": "B", "peak_fwdbwd_bytes": "B"}  # the peak_* ones on CUDA only
MODEL_METRICS = {"model_saved_bytes": "B", "model_peak_fwd_bytes": "B", "model_peak_fwdbwd_bytes": "B",
                 "model_flops_fwd": "FLOP", "model_flops_fwdbwd": "FLOP"}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


# ---- configuration --------------------------------------------------------------------------------------

@dataclass
class BenchConfig:
    """One sweep. Defaults: 8 heads of D=64 (BERT-base's head size), batch 1, FAVOR+'s released m=256."""
    lengths: tuple = (256, 512, 1024, 2048, 4096, 8192)  # n measured on the real device
    model_lengths: tuple = None                          # n for the meta model; None: lengths doubled to 65536
    methods: tuple = None                                # names (see `method_names()`); None: DEFAULT_METHODS
    batch: int = 1
    heads: int = 8
    dim_head: int = 64
    nb_features: int = 256                               # m for ours and performer-pytorch
    device: str = "auto"                                 # "auto" = cuda when available, else cpu
    dtype: str = "float32"
    passes: tuple = ("fwd", "fwdbwd")
    min_run_time: float = 0.3    # seconds of timed calls per (method, n, pass), split over `rounds` blocks
    rounds: int = 5
    max_seconds: float = 5.0     # one call slower than this -> "slow" (and larger n skipped)
    max_bytes: int = None        # predicted peak above this -> "oom" without running; None: see resolve_max_bytes
    seed: int = 0
    threads: int = None          # CPU threads for torch during the sweep; None: leave torch's setting
    progress: bool = True


DEFAULT_METHODS = ("exact", "exact-causal", "sdpa", "sdpa-causal", "linformer-k64", "linformer-k128",
                   "linformer-k256", "favor", "favor-causal", "efficient", "peer-linformer-k256", "peer-performer",
                   "peer-performer-causal", "peer-lat", "peer-lat-causal")
# Not in the default sweep, available by name: "efficient-causal" (its exact chunked scan is a Python loop over
# n/64 chunks, slow on CPU and ~1 minute in the meta model at n=65536) and any linformer-k<K>.


def resolve_device(name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch.cuda.is_available() is False; use --device cpu or auto")
    return device


def resolve_dtype(name):
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


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


# ---- methods ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Method:
    """A benchmarked attention function. build(n, cfg, tensors) -> fn(q, k, v) -> out; buffers are made there."""
    name: str
    label: str
    build: object
    causal: bool = False
    k: int = None       # Linformer projected length
    linear: bool = True  # expected O(n) memory and FLOPs
    source: str = "minilin"


class _Tensors:
    """Makes the random tensors of a case: seeded on the CPU (same values on every device), empty on meta."""

    def __init__(self, device, dtype, seed):
        self.device, self.dtype = device, dtype
        self.generator = torch.Generator().manual_seed(seed)

    def randn(self, *shape, std=1.0, requires_grad=False):
        if self.device.type == "meta":
            t = torch.empty(*shape, device="meta", dtype=self.dtype)
        else:
            t = (torch.randn(*shape, generator=self.generator) * std).to(self.device, self.dtype)
        return t.requires_grad_(requires_grad)

    def projection(self, nb_features, dim):
        if self.device.type == "meta":
            return torch.empty(nb_features, dim, device="meta", dtype=self.dtype)
        from minilin.performer import orthogonal_gaussian
        return orthogonal_gaussian(nb_features, dim, generator=self.generator, dtype=self.dtype,
                                   device=self.device)


def _exact(n, cfg, tensors, *, causal):
    return partial(softmax_attention, causal=causal)


def _sdpa(n, cfg, tensors, *, causal):
    def fn(q, k, v):
        if q.device.type == "meta":  # model the fused kernel SDPA runs on CPU and CUDA, not the math fallback
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)[0]
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def _linformer(n, cfg, tensors, *, k):
    from minilin.linformer import linformer_attention
    E = tensors.randn(k, n, std=k ** -0.5)  # (k, n) shared by heads; N(0, 1/k) as in the paper's JL argument
    Fm = tensors.randn(k, n, std=k ** -0.5)
    return partial(linformer_attention, E=E, F=Fm)


def _efficient(n, cfg, tensors, *, causal):
    from minilin.efficient import efficient_attention
    return partial(efficient_attention, causal=causal)


def _favor(n, cfg, tensors, *, causal):
    from minilin.performer import favor_attention
    projection = tensors.projection(cfg.nb_features, cfg.dim_head)  # (m, D)
    return partial(favor_attention, projection=projection, causal=causal)


@contextlib.contextmanager
def _quiet_peer():
    """Peers warn on import (distutils LooseVersion) and print on construction; keep the sweep's output clean."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


class _Given(nn.Module):
    """Stands in for a peer's nn.Linear: returns the tensor we set, so the peer's forward runs on our q, k, v."""

    def __init__(self):
        super().__init__()
        self.value = None

    def forward(self, x):
        return self.value


def _peer_linformer(n, cfg, tensors, *, k):
    """linformer 0.2.3 LinformerSelfAttention with its projections replaced by our q, k, v (same E, F law)."""
    with _quiet_peer():
        from linformer import LinformerSelfAttention
        with torch.random.fork_rng(devices=[]):  # its init draws from the global RNG
            attn = LinformerSelfAttention(dim=cfg.heads * cfg.dim_head, seq_len=n, k=k, heads=cfg.heads,
                                          dim_head=cfg.dim_head)
    attn.to_q, attn.to_k, attn.to_v, attn.to_out = _Given(), _Given(), _Given(), nn.Identity()
    attn.proj_k = nn.Parameter(tensors.randn(n, k, std=k ** -0.5), requires_grad=False)  # its E is (n, k)
    attn.proj_v = nn.Parameter(tensors.randn(n, k, std=k ** -0.5), requires_grad=False)

    def fn(q, k_, v):
        B, H, N, D = q.shape
        merge = lambda t: t.transpose(1, 2).reshape(B, N, H * D)  # (B, N, H*D): the layout its to_q returns
        attn.to_q.value, attn.to_k.value, attn.to_v.value = merge(q), merge(k_), merge(v)
        out = attn(attn.to_q.value)  # (B, N, H*D)
        return out.view(B, N, H, D).transpose(1, 2)  # (B, H, N, D)
    return fn


def _peer_performer(n, cfg, tensors, *, causal):
    """performer-pytorch 1.1.4 FastAttention (q, k, v -> out) with our projection in its buffer.

    Causal without the fast_transformers CUDA extension falls back to `causal_linear_attention_noncuda`, as
    it does for every pip user; that fallback keeps a (B, H, N, m, D) tensor for backward (REFERENCES.md).
    """
    with _quiet_peer():
        from performer_pytorch import FastAttention
        with torch.random.fork_rng(devices=[]):
            fast = FastAttention(dim_heads=cfg.dim_head, nb_features=cfg.nb_features, causal=causal)
    fast.projection_matrix = tensors.projection(cfg.nb_features, cfg.dim_head)  # (m, D) buffer
    return fast


def _peer_lat(n, cfg, tensors, *, causal):
    """linear-attention-transformer 0.19.1 global heads: Efficient Attention (Shen et al., arXiv 1812.01243).

    Causal uses bucket_size=1, the default of its SelfAttention (blindspot_size=1).
    """
    with _quiet_peer():
        from linear_attention_transformer.linear_attention_transformer import causal_linear_attn, linear_attn
    fn = partial(causal_linear_attn, bucket_size=1) if causal else linear_attn
    return lambda q, k, v: fn(q, k, v)


_FIXED = {
    "exact": ("exact softmax attention (minilin.attention.softmax_attention)", partial(_exact, causal=False),
              False, False, "minilin"),
    "exact-causal": ("exact, causal", partial(_exact, causal=True), True, False, "minilin"),
    "sdpa": ("torch.nn.functional.scaled_dot_product_attention (fused kernel)", partial(_sdpa, causal=False),
             False, True, "torch"),
    "sdpa-causal": ("SDPA, is_causal=True", partial(_sdpa, causal=True), True, True, "torch"),
    "favor": ("FAVOR+ (minilin.performer.favor_attention), m = nb_features", partial(_favor, causal=False),
              False, True, "minilin"),
    "favor-causal": ("FAVOR+ causal, chunked prefix sums", partial(_favor, causal=True), True, True, "minilin"),
    "efficient": ("Efficient Attention (minilin.efficient.efficient_attention, Shen et al.)",
                  partial(_efficient, causal=False), False, True, "minilin"),
    "efficient-causal": ("Efficient Attention causal (its linear-attention form, chunked scan)",
                         partial(_efficient, causal=True), True, True, "minilin"),
    "peer-performer": ("performer-pytorch FastAttention", partial(_peer_performer, causal=False), False, True,
                       "performer-pytorch"),
    "peer-performer-causal": ("performer-pytorch FastAttention causal (non-CUDA fallback)",
                              partial(_peer_performer, causal=True), True, True, "performer-pytorch"),
    "peer-lat": ("linear-attention-transformer linear_attn (Efficient Attention)",
                 partial(_peer_lat, causal=False), False, True, "linear-attention-transformer"),
    "peer-lat-causal": ("linear-attention-transformer causal_linear_attn, bucket_size=1",
                        partial(_peer_lat, causal=True), True, True, "linear-attention-transformer"),
}


def get_method(name):
    """Method by name: the fixed names in `method_names()`, plus linformer-k<K> and peer-linformer-k<K>."""
    if name in _FIXED:
        label, build, causal, linear, source = _FIXED[name]
        return Method(name, label, build, causal=causal, linear=linear, source=source)
    match = re.fullmatch(r"(peer-)?linformer-k(\d+)", name)
    if match:
        k = int(match.group(2))
        if match.group(1):
            return Method(name, f"linformer package LinformerSelfAttention, k={k}",
                          partial(_peer_linformer, k=k), k=k, source="linformer")
        return Method(name, f"Linformer (minilin.linformer.linformer_attention), k={k}",
                      partial(_linformer, k=k), k=k)
    raise ValueError(f"unknown method {name!r}; choose from {', '.join(method_names())} "
                     f"(any k in linformer-k<K> / peer-linformer-k<K>)")


def method_names():
    return tuple(_FIXED) + ("linformer-k<K>", "peer-linformer-k<K>")


# ---- memory and FLOPs --------------------------------------------------------------------------------

def _storage_key(t):
    return t.untyped_storage()._cdata  # the C++ StorageImpl: views of one buffer share it


def saved_tensor_bytes(fn, *inputs):
    """(bytes autograd saves for backward while running fn(*inputs), fn's output); each storage counted once.

    A saved view of a larger buffer keeps all of it alive, so whole storages are counted. Works on "meta".
    """
    storages = {}

    def pack(t):
        storages[_storage_key(t)] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*inputs)
    return sum(storages.values()), out


def _tensors(values):
    """The tensors among an aten op's arguments or results (tensors, or lists/tuples of tensors)."""
    found = []
    for x in values:
        if isinstance(x, torch.Tensor):
            found.append(x)
        elif isinstance(x, (list, tuple)):
            found.extend(t for t in x if isinstance(t, torch.Tensor))
    return found


class LiveBytes(TorchDispatchMode):
    """Peak of the bytes held by storages created inside the mode (each counted until it is freed).

    Inputs and anything allocated before entering are not counted (as with max_memory_allocated minus the
    memory in use before the call). Views share their input's storage and allocate nothing. Kernel-internal
    workspaces are invisible here, so on a real device this is a lower bound of the allocator's peak.
    """

    def __init__(self):
        super().__init__()
        self.live, self.current, self.peak = {}, 0, 0

    def _free(self, key):
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        seen = {_storage_key(t) for t in _tensors(args) + _tensors(kwargs.values())}
        for t in _tensors((out,)):
            storage = t.untyped_storage()
            key = _storage_key(t)
            if key in seen or key in self.live:  # a view or an in-place result: no new memory
                continue
            self.live[key] = storage.nbytes()
            self.current += self.live[key]
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._free, key)
        return out


# FlopCounterMode knows the CUDA SDPA kernels; the CPU flash kernel (which the model runs) costs the same
def _cpu_flash_flops(query, key, value, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(query, key, value)


def _cpu_flash_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs):
    return sdpa_backward_flop_count(grad_out, query, key, value)


_SDPA_CPU_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flops,
}


def flop_counter():
    """FlopCounterMode that also counts the CPU flash-attention kernel (matmul-like ops only)."""
    return FlopCounterMode(display=False, custom_mapping=_SDPA_CPU_FLOPS)


def _inputs(cfg, n, tensors, requires_grad):
    shape = (cfg.batch, cfg.heads, n, cfg.dim_head)
    return tuple(tensors.randn(*shape, requires_grad=requires_grad) for _ in range(3))


_MODEL_CACHE = {}


def model_case(method, n, cfg):
    """The meta-device model of one case: {metric: value} for MODEL_METRICS, no memory allocated.

    A pure function of (method, n, B, H, D, m, dtype), so results are cached for the process: a notebook that
    validates the model and then sweeps does not pay twice (meta kernels run in Python, ~0.1 ms per op).
    """
    method = get_method(method) if isinstance(method, str) else method
    key = (method.name, n, cfg.batch, cfg.heads, cfg.dim_head, cfg.nb_features, cfg.dtype)
    if key not in _MODEL_CACHE:
        _MODEL_CACHE[key] = _model_case(method, n, cfg)
    return dict(_MODEL_CACHE[key])


def _model_case(method, n, cfg):
    tensors = _Tensors(torch.device("meta"), resolve_dtype(cfg.dtype), cfg.seed)
    fn = method.build(n, cfg, tensors)
    q, k, v = _inputs(cfg, n, tensors, requires_grad=True)
    with torch.no_grad(), LiveBytes() as live, flop_counter() as flops:
        fn(q, k, v)
    peak_fwd, flops_fwd = live.peak, flops.get_total_flops()
    with LiveBytes() as live, flop_counter() as flops:
        saved, out = saved_tensor_bytes(fn, q, k, v)
        # .backward, not autograd.grad: FlopCounterMode's module tracker hooks leaf inputs of nn.Module peers,
        # which autograd.grad does not support; the gradients land in q.grad etc. (same allocations)
        out.backward(torch.empty_like(out))
        del out
    return {"model_saved_bytes": saved, "model_peak_fwd_bytes": peak_fwd,
            "model_peak_fwdbwd_bytes": live.peak, "model_flops_fwd": flops_fwd,
            "model_flops_fwdbwd": flops.get_total_flops()}


def measured_saved_bytes(method, n, cfg, device=None):
    """Bytes saved for backward by one real forward on `device` (default: cfg.device)."""
    method = get_method(method) if isinstance(method, str) else method
    device = resolve_device(cfg.device if device is None else device)
    tensors = _Tensors(device, resolve_dtype(cfg.dtype), cfg.seed)
    fn = method.build(n, cfg, tensors)
    q, k, v = _inputs(cfg, n, tensors, requires_grad=True)
    return saved_tensor_bytes(fn, q, k, v)[0]


# ---- timing --------------------------------------------------------------------------------------------

def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def block_timer(call, device):
    """timer(number) -> seconds per call, the mean over `number` back-to-back calls.

    CUDA: events around the block (kernels are asynchronous, so host clocks would time the launches).
    CPU: torch.utils.benchmark.Timer with the process's thread count (its default is one thread); its
    timeit(number) makes max(number // 100, 2) untimed warm-up calls first, which also re-warms caches and
    the allocator after the other methods ran in between.
    """
    if device.type == "cuda":
        def run(number):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(number):
                call()
            end.record()
            torch.cuda.synchronize(device)
            return start.elapsed_time(end) / 1e3 / number
        return run
    from torch.utils import benchmark
    timer = benchmark.Timer(stmt="call()", globals={"call": call}, num_threads=torch.get_num_threads())
    return lambda number: timer.timeit(number).median


def _wall(call, device):
    _sync(device)
    t0 = time.perf_counter()
    call()
    _sync(device)
    return time.perf_counter() - t0


def _is_oom(err):
    text = str(err).lower()  # CUDA: torch.OutOfMemoryError; CPU: RuntimeError "can't allocate memory"
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text \
        or "can't allocate memory" in text


# ---- the sweep --------------------------------------------------------------------------------------

class _Case:
    """One (method, n) on the real device: inputs, the two callables, and their timings."""

    def __init__(self, method, n, cfg, device, dtype):
        tensors = _Tensors(device, dtype, cfg.seed)
        self.method, self.n = method, n
        fn = method.build(n, cfg, tensors)
        q, k, v = _inputs(cfg, n, tensors, requires_grad=True)
        grad_out = tensors.randn(*q.shape)

        def fwd():
            with torch.no_grad():
                return fn(q, k, v)

        def fwdbwd():
            return torch.autograd.grad(fn(q, k, v), (q, k, v), grad_out)

        self.calls = {"fwd": fwd, "fwdbwd": fwdbwd}
        self.fn, self.inputs, self.grad_out = fn, (q, k, v), grad_out
        self.rounds, self.number, self.timers, self.times = {}, {}, {}, {}
        self.failure = None


def _cuda_peak(call, device):
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    call()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def _free(device):
    if device.type == "cuda":  # hand cached blocks back so the next case's peak starts clean
        gc.collect()
        torch.cuda.empty_cache()


def run(cfg=None, **overrides):
    """Run a sweep; returns tidy rows (dicts with CSV_COLUMNS): one per method × n × metric."""
    cfg = replace(cfg or BenchConfig(), **overrides)
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg)
    finally:
        torch.set_num_threads(threads)


def _run(cfg):
    from tqdm import tqdm  # not tqdm.auto: in Jupyter without ipywidgets it warns on stderr

    device, dtype = resolve_device(cfg.device), resolve_dtype(cfg.dtype)
    max_bytes = resolve_max_bytes(cfg, device)
    methods = [get_method(m) for m in (cfg.methods or DEFAULT_METHODS)]
    lengths = sorted(set(cfg.lengths))
    model_lengths = sorted(set(cfg.model_lengths or default_model_lengths(lengths)) | set(lengths))
    for name in cfg.passes:
        if name not in ("fwd", "fwdbwd"):
            raise ValueError(f"passes must be 'fwd' and/or 'fwdbwd', got {name!r}")
    common = {"device": device.type, "device_name": device_name(device), "dtype": cfg.dtype,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "batch": cfg.batch, "heads": cfg.heads, "dim_head": cfg.dim_head,
              "nb_features": cfg.nb_features}
    rows = []

    def add(method, n, metric, value, source, status="ok", note=""):
        unit = {**MEASURED_METRICS, **MODEL_METRICS}[metric]
        rows.append({"method": method.name, "n": n, "metric": metric,
                     "value": float(value) if status == "ok" else math.nan, "unit": unit, "source": source,
                     "status": status, "note": note, **common, "k": method.k if method.k else "",
                     "causal": method.causal})

    measured_names = [f"time_{p}" for p in cfg.passes] + ["saved_bytes"]
    if device.type == "cuda":
        measured_names += [f"peak_{p}_bytes" for p in cfg.passes]
    stopped = {}  # method name -> (status, note) once it was slow / out of memory
    bar = tqdm(total=len(model_lengths) * len(methods), desc="bench", disable=not cfg.progress)
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
            failure, case, out = None, None, None
            try:
                case = _Case(method, n, cfg, device, dtype)
                # warm-up, cheapest first so that a hopeless case stops early: a no_grad forward, then the
                # forward with autograd that measures the saved bytes, then its backward (the fwdbwd warm-up)
                warm = {"fwd": _wall(case.calls["fwd"], device)}  # first call: page faults, kernel selection
                if warm["fwd"] > 4 * cfg.max_seconds:
                    raise _TooSlow("fwd", warm["fwd"])
                _sync(device)
                t0 = time.perf_counter()
                saved, out = saved_tensor_bytes(case.fn, *case.inputs)
                add(method, n, "saved_bytes", saved, "measured")
                if "fwdbwd" in cfg.passes:
                    torch.autograd.grad(out, case.inputs, case.grad_out)
                    _sync(device)
                    warm["fwdbwd"] = time.perf_counter() - t0
                del out
                for p in cfg.passes:
                    if warm[p] > 4 * cfg.max_seconds:
                        raise _TooSlow(p, warm[p])
                    once = min(warm[p], _wall(case.calls[p], device))  # decides "slow" and the block size;
                    if once > cfg.max_seconds:  # the min of two calls, so one descheduling does not decide
                        raise _TooSlow(p, once)
                    # fast calls: `rounds` blocks of many calls; slow ones: fewer blocks of one call
                    case.rounds[p] = min(cfg.rounds, max(1, int(cfg.min_run_time / max(once, 1e-7))))
                    case.number[p] = max(1, int(cfg.min_run_time / case.rounds[p] / max(once, 1e-7)))
                    case.timers[p] = block_timer(case.calls[p], device)
                    case.times[p] = []
                    if device.type == "cuda":
                        add(method, n, f"peak_{p}_bytes", _cuda_peak(case.calls[p], device), "measured")
                cases.append(case)
            except _TooSlow as err:
                failure = ("slow", f"one {err.pass_name} call took {err.seconds:.3g} s "
                                   f"> limit {cfg.max_seconds:.3g} s")
            except (RuntimeError, MemoryError) as err:
                if not _is_oom(err):
                    raise
                failure = ("oom", f"out of memory: {str(err).splitlines()[0][:120]}")
            case = out = None  # a failed case's tensors go now, not when the next case is already allocated
            if failure:
                status, note = failure
                done = {r["metric"] for r in rows if r["method"] == method.name and r["n"] == n
                        and r["source"] == "measured"}
                for metric in measured_names:  # measurements taken before the failure are kept
                    if metric not in done:
                        add(method, n, metric, math.nan, "measured", status, note)
                stopped[method.name] = f"{note} at n={n}"
                _free(device)
        # interleaved timing: every round visits every case, starting at a different one each time
        for r in range(cfg.rounds):
            for i in range(len(cases)):
                case = cases[(i + r) % len(cases)]
                for p in cfg.passes:
                    if r < case.rounds[p] and case.failure is None:
                        try:
                            case.times[p].append(case.timers[p](case.number[p]))
                        except (RuntimeError, MemoryError) as err:  # CUDA: fragmentation can still bite
                            if not _is_oom(err):
                                raise
                            case.failure = f"out of memory while timing: {str(err).splitlines()[0][:100]}"
                            _free(device)
        for case in cases:
            for p in cfg.passes:
                if case.failure is not None:
                    add(case.method, n, f"time_{p}", math.nan, "measured", "oom", case.failure)
                    stopped[case.method.name] = f"{case.failure} at n={n}"
                    continue
                times = sorted(case.times[p])
                add(case.method, n, f"time_{p}", times[len(times) // 2], "measured",
                    note=f"median of {len(times)} blocks of {case.number[p]} calls")
        del cases
        _free(device)
    bar.close()
    return rows


class _TooSlow(Exception):
    def __init__(self, pass_name, seconds):
        super().__init__(pass_name, seconds)
        self.pass_name, self.seconds = pass_name, seconds


# ---- results ------------------------------------------------------------------------------------------

def to_frame(rows):
    """Tidy pandas DataFrame with CSV_COLUMNS in order."""
    import pandas as pd
    return pd.DataFrame(list(rows), columns=list(CSV_COLUMNS))


def write_csv(rows, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    to_frame(rows).to_csv(path, index=False)
    return path


def load_csv(path):
    """Read a bench CSV back; checks the schema so plots never run on a foreign file."""
    import pandas as pd
    df = pd.read_csv(path, keep_default_na=True, dtype={"note": str, "k": "Int64"})
    missing = [c for c in CSV_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path} is not a minilin bench CSV: missing columns {missing}")
    df["note"] = df["note"].fillna("")
    return df


def series(df, method, metric, *, status="ok"):
    """(ns, values) of one method and metric, sorted by n, rows with the given status only."""
    sel = df[(df["method"] == method) & (df["metric"] == metric) & (df["status"] == status)].sort_values("n")
    return sel["n"].to_numpy(), sel["value"].to_numpy()


def growth_exponent(ns, values):
    """Least-squares slope of log(value) against log(n): ~2 for quadratic growth, ~1 for linear."""
    import numpy as np
    ns, values = np.asarray(ns, dtype=float), np.asarray(values, dtype=float)
    if len(ns) < 2 or np.any(values <= 0):
        raise ValueError("need at least two points with positive values to fit a growth exponent")
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def crossover_length(df, method, baseline, metric):
    """Smallest measured n from which `method` is below `baseline` at every larger n of both; None if never."""
    n_m, v_m = series(df, method, metric)
    n_b, v_b = series(df, baseline, metric)
    common = sorted(set(n_m.tolist()) & set(n_b.tolist()))
    wins = {n: v_m[n_m.tolist().index(n)] < v_b[n_b.tolist().index(n)] for n in common}
    # the baseline failing (oom/slow/skipped) while the method ran counts as the method winning
    failed = set(df[(df["method"] == baseline) & (df["metric"] == metric) & (df["status"] != "ok")]["n"])
    for n in sorted(failed & set(n_m.tolist())):
        wins[n] = True
    crossover = None
    for n in sorted(wins, reverse=True):
        if not wins[n]:
            break
        crossover = n
    return crossover


# ---- command line --------------------------------------------------------------------------------------

def parse_lengths(text):
    """'256,512,1024' or '256,512,...,16384' (continue the ratio of the first two up to the last)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if "..." in parts:
        i = parts.index("...")
        if i < 2 or i != len(parts) - 2:
            raise argparse.ArgumentTypeError("use '...' as in 256,512,...,16384 (two values, ..., last)")
        a, b, last = int(parts[0]), int(parts[1]), int(parts[-1])
        if b <= a:
            raise argparse.ArgumentTypeError("the first two lengths must increase")
        out = [int(x) for x in parts[:i]]
        while out[-1] * b // a <= last:
            out.append(out[-1] * b // a)
        if out[-1] != last:
            out.append(last)
        values = out
    else:
        values = [int(p) for p in parts]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"lengths must be positive integers, got {text!r}")
    return tuple(values)


def _parse_bytes(text):
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?i?B?)\s*", text, flags=re.I)
    if not match:
        raise argparse.ArgumentTypeError(f"memory must look like 512MiB, 4GiB or 1e9, got {text!r}")
    unit = match.group(2).upper().rstrip("B").rstrip("I")
    return int(float(match.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[unit])


# --quick leaves out peer-performer-causal: its non-CUDA fallback loops over 128 chunks in Python at every n,
# seconds per call on a CPU even at n=256 and the slowest meta model (name it in --methods to include it)
QUICK = {"lengths": (256, 512, 1024, 2048), "model_lengths": (256, 512, 1024, 2048, 4096, 16384, 65536),
         "min_run_time": 0.05, "rounds": 3, "max_seconds": 0.5,
         "methods": tuple(m for m in DEFAULT_METHODS if m != "peer-performer-causal")}


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m minilin bench",
        description="Time, memory and FLOP curves of attention variants at the attention-function level "
                    "(q, k, v -> out), ours and the peers' at matching B, H, D, k and m. Writes a tidy CSV "
                    "(one row per method x n x metric) and log-log PNG plots, and prints Linformer-Table-3-"
                    "style ratios. Measured rows come from this device; 'model' rows from the same code run "
                    "on device='meta' (no memory used), extended to n=65536.",
        epilog="examples:\n  python -m minilin bench --quick\n"
               "  python -m minilin bench --lengths 256,512,...,16384 --methods exact,sdpa,linformer-k256,favor\n"
               "  python -m minilin bench --device cuda --dtype float16 --out results/gpu\n\n"
               "methods: " + ", ".join(method_names()) + "\n  default: " + ",".join(DEFAULT_METHODS),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    d = BenchConfig()
    p.add_argument("--lengths", type=parse_lengths, default=None,
                   help="sequence lengths to measure, e.g. 256,512,...,16384 (default "
                        f"{','.join(map(str, d.lengths))}; --quick: {','.join(map(str, QUICK['lengths']))})")
    p.add_argument("--model-lengths", type=parse_lengths, default=None,
                   help="lengths for the meta-device model (default: the measured ones doubled up to 65536)")
    p.add_argument("--methods", default="default",
                   help="comma-separated method names, 'default' or 'all-ours' (the default ones without peers)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--batch", type=int, default=d.batch, help=f"batch size B (default {d.batch})")
    p.add_argument("--heads", type=int, default=d.heads, help=f"heads H (default {d.heads})")
    p.add_argument("--dim-head", type=int, default=d.dim_head, help=f"head dimension D (default {d.dim_head})")
    p.add_argument("--nb-features", type=int, default=d.nb_features,
                   help=f"FAVOR+ random features m, ours and performer-pytorch's (default {d.nb_features})")
    p.add_argument("--min-run-time", type=float, default=None,
                   help=f"seconds of timed calls per method, n and pass (default {d.min_run_time})")
    p.add_argument("--rounds", type=int, default=None, help=f"interleaved timing rounds (default {d.rounds})")
    p.add_argument("--max-seconds", type=float, default=None,
                   help=f"a single call slower than this is recorded as 'slow' (default {d.max_seconds})")
    p.add_argument("--max-memory", type=_parse_bytes, default=None,
                   help="predicted peak above this is recorded as 'oom' without running, e.g. 4GiB "
                        "(default on CPU: a quarter of RAM; on CUDA: run and catch out-of-memory errors)")
    p.add_argument("--passes", default="fwd,fwdbwd", help="fwd, fwdbwd or both (default)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: torch's own choice); 1 gives steadier timings on a busy "
                        "machine")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs, E, F and projections (default 0)")
    p.add_argument("--out", default="results/local", help="output folder for CSV and PNG (default results/local)")
    p.add_argument("--quick", action="store_true",
                   help="small CPU-friendly sweep, under 2 minutes on a 2-core CPU: lengths 256..2048, the model "
                        "at 256..2048, 4096, 16384, 65536, short timings, calls over 0.5 s recorded as slow, the "
                        "default methods except peer-performer-causal (seconds per call on a CPU)")
    p.add_argument("--no-plots", action="store_true", help="write the CSV only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def config_from_args(args):
    quick = QUICK if args.quick else {}
    if args.methods == "default":
        methods = quick.get("methods", DEFAULT_METHODS)
    elif args.methods == "all-ours":
        methods = tuple(m for m in DEFAULT_METHODS if not m.startswith("peer-"))
    else:
        methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    for m in methods:
        get_method(m)  # fail before running anything
    d = BenchConfig()
    pick = lambda value, key: value if value is not None else quick.get(key, getattr(d, key))
    return BenchConfig(
        lengths=pick(args.lengths, "lengths"),
        model_lengths=args.model_lengths if args.model_lengths or args.lengths else quick.get("model_lengths"),
        methods=methods,
        batch=args.batch, heads=args.heads, dim_head=args.dim_head, nb_features=args.nb_features,
        device=args.device, dtype=args.dtype, passes=tuple(p.strip() for p in args.passes.split(",")),
        min_run_time=pick(args.min_run_time, "min_run_time"), rounds=pick(args.rounds, "rounds"),
        max_seconds=pick(args.max_seconds, "max_seconds"), max_bytes=args.max_memory, seed=args.seed,
        threads=args.threads,
        progress=not args.no_progress)


def main(argv=None):
    """`python -m minilin bench ...`: run the sweep, write CSV (+ PNG), print the ratio tables."""
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    device = resolve_device(cfg.device)
    t0 = time.perf_counter()
    rows = run(cfg)
    stem = os.path.join(args.out, f"bench-{device.type}-{cfg.dtype}")
    write_csv(rows, stem + ".csv")
    written = [stem + ".csv"]
    df = load_csv(stem + ".csv")
    from minilin import plots
    if not args.no_plots:
        written += plots.save_figures(df, stem)
    print(plots.summary(df))
    print(f"{len(rows)} rows in {time.perf_counter() - t0:.1f} s elapsed; wrote " + ", ".join(written))
    return 0
