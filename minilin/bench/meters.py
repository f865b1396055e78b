"""The benchmark's meters: bytes saved for backward, live bytes, FLOPs, and timers.

    saved_storages      what autograd keeps for backward (`saved_tensors_hooks`), each storage once: shapes, bytes
    saved_tensor_bytes  their bytes added up
    LiveBytes           a TorchDispatchMode adding each new storage and subtracting it when freed: the peak
    Traffic             a TorchDispatchMode adding the bytes each operator reads and writes: eager HBM traffic
    OpTimes             a TorchDispatchMode adding the CPU time of each operator
    allocator_peak      the CPU allocator's own peak during a call (torch.profiler), kernel workspaces included
    flop_counter        torch's FlopCounterMode, plus the fused CPU flash-attention kernel (matmul-like ops only)
    model_case          all three on device="meta": shapes flow through every op, nothing is allocated
    block_timer         seconds per call: torch.utils.benchmark.Timer on CPU, CUDA events on GPU
"""
import contextlib
import gc
import os
import sys
import time
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from minilin.bench.methods import Tensors, attention_fn, case_inputs, features_of, get_method, resolve_dtype
from minilin.flops import flop_counter  # its own module, importing only torch

# ---- memory ------------------------------------------------------------------------------------------------


def storage_key(t):
    """A key shared by every view of one buffer (also on meta tensors, which have no data pointer)."""
    return t.untyped_storage()._cdata  # the C++ StorageImpl: views of one buffer share it


def saved_storages(fn, *inputs):
    """({storage key: (shape, bytes)} of what autograd saves for backward while running fn(*inputs), fn's output).

    Each storage is listed once (views of one buffer share it) and whole: a saved view keeps all of it alive.
    Works on "meta". Only storages still alive when fn returns are listed: a tensor saved by a side computation
    whose graph is dropped (a check, a statistic) is freed with it, and its address may be reused by the next storage.
    """
    kept = {}

    def pack(t):
        storage, key = t.untyped_storage(), storage_key(t)
        if key not in kept:
            kept[key] = (tuple(t.shape), storage.nbytes())
            weakref.finalize(storage, kept.pop, key, None)  # freed: forget it before its address is reused
        # a detached alias, not t itself: a saved *output* would otherwise hold its own grad_fn, a reference cycle
        # that keeps a dropped side computation alive until the garbage collector runs (autograd itself saves
        # outputs without that cycle)
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*inputs)
    return kept, out


def saved_roles(fn, named):
    """([(shape, bytes, role)] of what autograd saves while running fn on `named`'s tensors ({label: tensor}, in call
    order), fn's output). A saved input or the output is named by its buffer, an (..., N, N) matrix is "the
    probabilities P", a (B, H, N) tensor "one log-sum-exp per query and head", anything else "other"."""
    inputs = list(named.values())
    kept, out = saved_storages(fn, *inputs)
    roles = {**{storage_key(t): label for label, t in named.items()}, storage_key(out): "the output"}
    n, rows = inputs[0].shape[-2], []
    for key, (shape, nbytes) in kept.items():
        guess = ("the probabilities P" if shape[-2:] == (n, n) else
                 "one log-sum-exp per query and head" if shape == tuple(inputs[0].shape[:-1]) else "other")
        rows.append((shape, nbytes, roles.get(key, guess)))
    return rows, out


def saved_tensor_bytes(fn, *inputs):
    """(bytes autograd saves for backward while running fn(*inputs), fn's output): `saved_storages`, added up."""
    kept, out = saved_storages(fn, *inputs)
    return sum(nbytes for _, nbytes in kept.values()), out


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
        seen = {storage_key(t) for t in _tensors(args) + _tensors(kwargs.values())}
        for t in _tensors((out,)):
            storage = t.untyped_storage()
            key = storage_key(t)
            if key in seen or key in self.live:  # a view or an in-place result: no new memory
                continue
            self.live[key] = storage.nbytes()
            self.current += self.live[key]
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._free, key)
        return out


class Traffic(TorchDispatchMode):
    """Bytes every operator reads and writes (`moved`): eager PyTorch's HBM traffic, where each result goes to memory.

    Views (slices, transposes, reshapes) move nothing and are skipped. Works on "meta". A fused kernel moves less:
    this counts each aten operator as its own kernel, as eager execution runs it.
    """

    def __init__(self):
        super().__init__()
        self.moved = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not (func.is_view or func is torch.ops.aten._unsafe_view.default):
            self.moved += sum(t.numel() * t.element_size()
                              for t in _tensors(args) + _tensors(kwargs.values()) + _tensors((out,)))
        return out


class OpTimes(TorchDispatchMode):
    """CPU seconds (`time.process_time`) spent in each aten operator run inside the mode: `seconds[name]`."""

    def __init__(self):
        super().__init__()
        self.seconds = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.process_time()
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        self.seconds[name] = self.seconds.get(name, 0.0) + time.process_time() - t0
        return out


@contextlib.contextmanager
def _quiet_fd2():
    """Silence file descriptor 2 (C++ log lines, which Python's sys.stderr never sees) for the block."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def allocator_peak(call):
    """Peak bytes the CPU allocator held during call() above what it held before: a meter independent of LiveBytes.

    torch.profiler's profile_memory records every allocation and free of PyTorch's CPU allocator, buffers that a
    kernel allocates internally included (LiveBytes, at the operator level, cannot see those); the running sum of
    these events in time order peaks here. CPU only (on CUDA: torch.cuda.max_memory_allocated). The profiler's
    own log lines, written by its C++ side to file descriptor 2, are silenced.

    call() runs once unprofiled first (once-only buffers). Blocks allocated before the profiled call and freed
    inside it are ignored, as they should be, with one exception: the profiler remembers every block it saw
    allocated, and forgets it only if it also sees the free. So a call that leaves a buffer alive after it returns
    (a module keeping a copy of its last input) leaves a stale entry, which can later be matched to another block
    at the same address and lower a later measurement. Measure functions that free what they allocate.
    """
    from torch.profiler import ProfilerActivity, profile
    call()
    gc.collect()
    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak


# ---- FLOPs: flop_counter (minilin.flops) -----------------------------------------------------------------

# ---- the meta-device model -------------------------------------------------------------------------------

_MODEL_CACHE = {}


def model_case(method, n, cfg):
    """The meta-device model of one case: {metric: value} for MODEL_METRICS, no memory allocated.

    A pure function of (method, n, B, H, D, m, dtype), so results are cached for the process: a notebook that
    validates the model and then sweeps does not pay twice (meta kernels run in Python, ~0.1 ms per op).
    """
    method = get_method(method)
    key = (method.name, n, cfg.batch, cfg.heads, cfg.dim_head, features_of(method, cfg), cfg.dtype)
    if key not in _MODEL_CACHE:
        _MODEL_CACHE[key] = _model_case(method, n, cfg)
    return dict(_MODEL_CACHE[key])


def _model_case(method, n, cfg):
    make = Tensors("meta", resolve_dtype(cfg.dtype), cfg.seed)
    fn = attention_fn(method, n, cfg, make)
    q, k, v = case_inputs(cfg, n, make, requires_grad=True)
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


def operator_bytes(method, n, cfg):
    """Bytes one no-grad forward's operators read and write (`Traffic`), on the meta device: each operator's inputs
    plus outputs, not the traffic inside a fused kernel."""
    make = Tensors("meta", resolve_dtype(cfg.dtype), cfg.seed)
    fn = attention_fn(method, n, cfg, make)
    q, k, v = case_inputs(cfg, n, make, requires_grad=False)
    with torch.no_grad(), Traffic() as traffic:
        fn(q, k, v)
    return traffic.moved


def measured_saved_bytes(method, n, cfg, device=None):
    """Bytes saved for backward by one real forward on `device` (default: cfg.device)."""
    from minilin.device import resolve_device
    make = Tensors(resolve_device(cfg.device if device is None else device), resolve_dtype(cfg.dtype), cfg.seed)
    fn = attention_fn(method, n, cfg, make)
    q, k, v = case_inputs(cfg, n, make, requires_grad=True)
    return saved_tensor_bytes(fn, q, k, v)[0]


# ---- time ------------------------------------------------------------------------------------------------------

def sync(device):
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


def wall(call, device):
    """Seconds of one call (synchronised on CUDA): the warm-up measurement that decides "slow"."""
    sync(device)
    t0 = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - t0


def cuda_peak(call, device):
    """torch.cuda.max_memory_allocated during one call, above the memory allocated before it."""
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    call()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def is_oom(err):
    text = str(err).lower()  # CUDA: torch.OutOfMemoryError; CPU: RuntimeError "can't allocate memory"
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text \
        or "can't allocate memory" in text


def free(device):
    if device.type == "cuda":  # hand cached blocks back so the next case's peak starts clean
        gc.collect()
        torch.cuda.empty_cache()


@contextlib.contextmanager
def torch_threads(threads):
    """Run the block with torch's CPU thread count set to `threads` (None or 0: torch's own), restored after."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def progress_bar(total, *, desc, enabled):
    """A tqdm bar on stderr; off when not enabled or TQDM_DISABLE is set (read now: tqdm reads it at import)."""
    from tqdm import tqdm  # not tqdm.auto: in Jupyter without ipywidgets it warns on stderr
    env_off = os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no")
    return tqdm(total=total, desc=desc, unit="step", disable=env_off or not enabled)
