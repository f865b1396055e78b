"""Checks for exercises/ex06_memory.py (Tasks 6.1-6.5), against minilin's code and minilin.bench's meters.

Task 6.1 (optional, a warm-up) generalises notebook 06's saved-bytes count for exact attention to any shape; 6.2 (the
saved bytes of
Linformer, with E = F shared or not) and 6.3 (the length where a linear method's counted FLOPs fall below exact
attention's) are extend tasks; 6.4 is exact attention's backward pass one block of keys at a time from the saved log-sum-exp
(the probabilities rebuilt per block, as a fused kernel's backward does), checked against autograd through
softmax_attention and for the bytes it holds at once (live bytes, as bench.LiveBytes counts them); 6.5 is the
predict-then-measure task: the share of the work a causal kernel with rectangular tiles computes, measured with
FlopCounterMode on a blocked loop. Byte and FLOP counts come from minilin's own code on the meta device.
"""
import math

import torch
from torch.utils.flop_counter import FlopCounterMode

from minilin.attention import softmax_attention
from minilin.grading.checks import Chapter, captured, check, equal, expect, expect_close, expect_within, kind, rand, raises
from minilin.linformer import linformer_attention

CHAPTER = Chapter(6, "ex06_memory", "memory and time")
DTYPES = {8: torch.float64, 4: torch.float32, 2: torch.bfloat16}  # bytes per number -> dtype


def _bench():
    """minilin.bench, imported only when chapter 6's checks are built: the grader imports only what it grades
    (the benchmark's package pulls in its command line)."""
    from minilin import bench
    return bench


def _meta(*shape, itemsize, grad=True):
    return torch.empty(*shape, device="meta", dtype=DTYPES[itemsize], requires_grad=grad)


def exact_saved(B, H, N, M, D, Dv, itemsize):
    """Bytes autograd keeps for backward of minilin.attention.softmax_attention, measured on meta tensors."""
    q, k, v = _meta(B, H, N, D, itemsize=itemsize), _meta(B, H, M, D, itemsize=itemsize), \
        _meta(B, H, M, Dv, itemsize=itemsize)
    return _bench().saved_tensor_bytes(softmax_attention, q, k, v)[0]


def linformer_saved(B, H, N, n, D, Dv, k, itemsize, shared):
    """The same for minilin.linformer.linformer_attention with fixed (k, n) projections (E is F when shared)."""
    q, keys, values = _meta(B, H, N, D, itemsize=itemsize), _meta(B, H, n, D, itemsize=itemsize), \
        _meta(B, H, n, Dv, itemsize=itemsize)
    E = _meta(k, n, itemsize=itemsize, grad=False)
    F = E if shared else _meta(k, n, itemsize=itemsize, grad=False)
    return _bench().saved_tensor_bytes(lambda a, b, c: linformer_attention(a, b, c, E, F), q, keys, values)[0]


METER = "minilin.bench.saved_tensor_bytes on meta tensors"


@CHAPTER.task("6.1", "exact_saved_bytes")
def exact_saved_bytes(f):
    """the bytes exact attention keeps for backward, at any shape and dtype"""
    cases = (((2, 3, 8, 8, 4, 4, 4), "self-attention N = M, D = Dv, float32"),
             ((2, 3, 5, 7, 4, 6, 8), "cross-attention N != M, D != Dv, float64"),
             ((3, 4, 6, 9, 3, 5, 2), "N != M, D != Dv, bfloat16 (2 bytes a number)"))
    for shape, name in cases:
        yield equal(f(*shape), exact_saved(*shape),
                    what=f"the bytes softmax_attention saves, {name}, (B, H, N, M, D, Dv, itemsize) = {shape} "
                         f"({METER})")


@CHAPTER.task("6.2", "linformer_saved_bytes", extend=True)
def linformer_saved_bytes(f):
    """the bytes Linformer keeps for backward, with separate or shared E = F"""
    cases = (((2, 3, 10, 10, 4, 4, 3, 4, False), "separate E, F, N = n, float32"),
             ((2, 3, 10, 10, 4, 4, 3, 4, True), "shared E = F, N = n, float32"),
             ((3, 2, 7, 12, 5, 3, 4, 8, True), "shared E = F, N != n, D != Dv, float64"),
             ((3, 2, 7, 12, 5, 3, 6, 8, False), "separate E, F, N != n, D != Dv, k = 6, float64"))
    for args, name in cases:
        yield equal(f(*args), linformer_saved(*args),
                    what=f"the bytes linformer_attention saves, {name}, (B, H, N, n, D, Dv, k, itemsize, shared) = "
                         f"{args} ({METER})")
    # sharing removes exactly one (k, n) matrix from what backward keeps
    args = (2, 4, 9, 11, 3, 6, 5, 8)
    separate, shared = f(*args, False), f(*args, True)
    expected = linformer_saved(*args, False) - linformer_saved(*args, True)

    def one_matrix_less(a, b):
        expect(type(a) is int and type(b) is int, separate, f"returned {kind(a)} and {kind(b)}, expected Python ints")
        expect(a - b == expected, separate, f"separate minus shared is {a - b} bytes, expected {expected} "
               f"(the meter's difference: the storage of the one projection that sharing removes)")
    yield check(separate, shared, judge=one_matrix_less)


def _flops(method, n, D, size):
    name = {"performer": "performer", "linear": "linear", "linformer": f"linformer-k{size}"}[method]
    bench = _bench()
    cfg = bench.BenchConfig(batch=2, heads=3, dim_head=D, nb_features=size or 16, device="cpu", progress=False)
    return bench.model_case(name, n, cfg)["model_flops_fwd"], bench.model_case("exact", n, cfg)["model_flops_fwd"]


@CHAPTER.task("6.3", "flop_crossover", extend=True)
def flop_crossover(f):
    """the shortest length at which a linear method counts fewer FLOPs than exact attention"""
    cases = (("performer", 8, 12), ("performer", 16, 32), ("linear", 8, None), ("linear", 16, None),
             ("linformer", 8, 12), ("linformer", 16, 5))
    for method, D, size in cases:
        call = f(method, D, size)

        def crossover(n, method=method, D=D, size=size, call=call):
            expect(type(n) is int and 2 <= n <= 100_000, call,  # every crossover here is below 100
                   f"returned {kind(n)}, expected a Python int from 2 to 100000")
            at, exact_at = _flops(method, n, D, size)
            before, exact_before = _flops(method, n - 1, D, size)
            where = f"counted forward FLOPs (minilin.bench.model_case, B = 2, H = 3, D = {D})"
            expect(at < exact_at, call, f"at n = {n} the method counts {at:,} FLOPs, exact attention {exact_at:,}: "
                   f"not fewer ({where})")
            expect(before >= exact_before, call, f"at n = {n - 1} the method already counts fewer, {before:,} against "
                   f"exact attention's {exact_before:,}: the crossover is shorter ({where})")
        yield check(call, judge=crossover)
    yield raises(f("exact", 8, None), "ValueError", why="for a method that is not one of the linear ones")


def _small_intermediates(call, b, h, n, m, itemsize=8):
    """A step: while the call runs, the bytes it holds at once (every tensor it makes, counted until freed) stay
    below half of the B·H·N·M scores, and no single tensor it makes holds that many entries."""
    def judge(got):
        expect(isinstance(got, dict) and "largest" in got, call, f"returned {kind(got)}; expected the function's output")
        half = b * h * n * m // 2
        expect(got["largest"] < half, call, f"made a tensor of {got['largest']} elements, at least half of the "
               f"B·H·N·M = {2 * half} scores of one (N x M) = ({n} x {m}) matrix per head: rebuild one block of "
               f"keys at a time from lse, never all the scores")
        expect(got.get("peak_bytes", 0) < half * itemsize, call, f"held {got.get('peak_bytes')} bytes at once, at "
               f"least the {half * itemsize} bytes of half the B·H·N·M = {2 * half} scores ({n} x {m} per head): "
               f"use each block's probabilities and let them go before the next block")
    return check(call, judge=judge)


def _autograd(q, k, v, dout):
    """(out, lse, (dq, dk, dv)): softmax_attention's forward, the scores' log-sum-exp, and autograd's gradients."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = softmax_attention(q, k, v)
    out.backward(dout)
    lse = torch.logsumexp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return out.detach(), lse.detach(), (q.grad, k.grad, v.grad)


@CHAPTER.task("6.4", "blocked_attention_backward", extend=True)
def blocked_attention_backward(f):
    """exact attention's backward pass, one block of keys at a time, from the saved log-sum-exp (linear memory)"""
    cases = (((2, 3, 5, 12, 4, 3), 4, 1.0, "blocks that divide M = 12"),
             ((1, 2, 6, 11, 8, 5), 3, 1.0, "a last block shorter than the others (M = 11, blocks of 3)"),
             ((2, 2, 4, 7, 3, 2), 16, 1.0, "one block (block >= M)"),
             ((2, 2, 5, 9, 4, 4), 2, 40.0, "scores of several hundred: exp overflows without lse"))
    for seed, ((b, h, n, m, d, dv), block, scale, name) in enumerate(cases):
        q = rand(b, h, n, d, seed=60 + 4 * seed, scale=scale)
        k, v = rand(b, h, m, d, seed=61 + 4 * seed, scale=scale), rand(b, h, m, dv, seed=62 + 4 * seed)
        dout = rand(b, h, n, dv, seed=63 + 4 * seed)
        out, lse, grads = _autograd(q, k, v, dout)
        call = f(q, k, v, out, lse, dout, block)

        def judge(got, grads=grads, name=name, call=call):
            expect(isinstance(got, (tuple, list)) and len(got) == 3, call,
                   f"returned {kind(got)}; expected a triple (dq, dk, dv)")
            for label, mine, ref in zip(("dq", "dk", "dv"), got, grads):
                expect(isinstance(mine, torch.Tensor), call, f"returned {kind(mine)} for {label}; expected a tensor")
                expect_close(mine, ref, call=call, atol=1e-9,
                             what=f"{label} from autograd through minilin.attention.softmax_attention, {name}")
        yield check(call, judge=judge)
    # memory: with blocks of 8 of the 256 keys, the bytes held at once stay below half the scores' (float64); the
    # gradients themselves are a small part of that (M (D + Dv) against N M / 2 per head), so building them with
    # lists and torch.cat passes too; keeping every block's probabilities holds twice the bound
    q, k, v, dout = rand(2, 2, 96, 4, seed=90), rand(2, 2, 256, 4, seed=91), rand(2, 2, 256, 3, seed=92), \
        rand(2, 2, 96, 3, seed=93)
    out, lse, _ = _autograd(q, k, v, dout)
    yield _small_intermediates(captured(f(q, k, v, out, lse, dout, 8), "matmul_shapes"), 2, 2, 96, 256)


def _measured_share(n, q_block, kv_block):
    """Counted FLOPs of a blocked causal loop (a tile computed whole when any of its keys is visible to any of
    its queries) on meta tensors, over the full product's."""
    q = torch.empty(1, 1, n, 8, device="meta")
    with FlopCounterMode(display=False) as full:
        q @ q.transpose(-2, -1)
    with FlopCounterMode(display=False) as tiles:
        for i in range(0, n, q_block):
            last = min(n, i + q_block) - 1
            for j in range(0, n, kv_block):
                if j <= last:  # the tile's first key is visible to its last query
                    q[..., i:i + q_block, :] @ q[..., j:j + kv_block, :].transpose(-2, -1)
    return tiles.get_total_flops() / full.get_total_flops()


@CHAPTER.task("6.5", "causal_block_work", extend=True)
def causal_block_work(f):
    """predict, then measure: the share of the full work a causal kernel with rectangular tiles computes"""
    for n, qb, kb in ((1536, 256, 512), (1536, 512, 256), (3072, 256, 512), (1000, 64, 300), (300, 32, 512),
                      (777, 100, 64), (96, 1, 1)):
        call = f(n, qb, kb)

        def judge(got, n=n, qb=qb, kb=kb, call=call):
            expect(isinstance(got, float), call, f"returned {kind(got)}, expected a Python float")
            expected = _measured_share(n, qb, kb)
            expect_within(abs(got - expected), 1e-12, call,
                          f"the difference from the measured share {expected:.6f} (FlopCounterMode on a blocked "
                          f"causal loop, n = {n}, tiles of {qb} queries x {kb} keys)")
        yield check(call, judge=judge)
