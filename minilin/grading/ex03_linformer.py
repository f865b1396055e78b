"""Checks for exercises/ex03_linformer.py (Tasks 3.1-3.6), against minilin.linformer and loop references.

3.1 mean pooling for n not divisible by k; 3.2 the hardened forward pass; 3.3 the R^2 of a probe from k principal
slots of a signal to its coefficients; 3.4 the smallest k that carries a share of them (the chapter's finding on
sums of 2, 3, 5 and 6 sinusoids); 3.5 (extend) a causal Linformer with windows; 3.6 (extend) cross-attention FLOPs.
"""
import math

import torch

from minilin import linformer
from minilin.attention import softmax_attention
from minilin.grading.checks import (CannotGrade, Chapter, Failure, check, compare, equal, expect_close, kind, rand,
                                    raises)

CHAPTER = Chapter(3, "ex03_linformer", "the Linformer layer", allowed=("minilin.attention.softmax_attention",))


def lengths_mask(*lengths, M):
    """(B, M) bool key padding mask: sequence b has lengths[b] real tokens, then padding."""
    return torch.arange(M)[None, :] < torch.tensor(lengths)[:, None]


def all_close(pairs, what, atol=1e-10):
    """One Step: every (call, expected) pair must match; the failure names the first call that does not."""
    calls = [c for c, _ in pairs]

    def judge(*results):
        for (call, exp), got in zip(pairs, results):
            expect_close(got, exp, call=call, what=what, atol=atol)
    return check(*calls, judge=judge)


def pooling_by_loop(k, n):
    """Reference: k contiguous windows, the first n % k of size ceil(n / k), each row averaging its window."""
    E, start = torch.zeros(k, n, dtype=torch.float64), 0
    for j in range(k):
        size = n // k + (1 if j < n % k else 0)
        E[j, start:start + size] = 1.0 / size
        start += size
    return E


POOL_SHAPES = ((4, 10), (3, 11), (5, 17), (4, 16), (7, 7), (1, 5))   # (k, n): indivisible ones first


@CHAPTER.task("3.1", "mean_pool_projection")
def mean_pool_projection(f):
    """mean pooling into k windows for any n >= k"""
    yield all_close([(f(k, n), pooling_by_loop(k, n)) for k, n in POOL_SHAPES[:3]],
                    "windows of sizes ceil(n/k) then floor(n/k), built one by one (n not divisible by k)", atol=1e-12)
    yield all_close([(f(k, n), pooling_by_loop(k, n)) for k, n in POOL_SHAPES[3:]],
                    "the same windows where n is divisible by k (k = n and k = 1 included)", atol=1e-12)
    yield all_close([(f(3, 8, dtype=torch.float32), pooling_by_loop(3, 8).float())], "the same in float32",
                    atol=1e-6)
    yield raises(f(6, 4), "ValueError", why="(k = 6 windows cannot cut n = 4 positions)")


# (B, H, N, M, D, Dv, k, seq_len): N != M, two head sizes, M < seq_len
FWD_SHAPES = ((2, 3, 5, 6, 4, 2, 4, 8), (3, 2, 7, 9, 9, 3, 5, 12))


def _forward_inputs(i, B, H, N, M, D, Dv, k, n, per_head=False):
    q, kk, v = rand(B, H, N, D, seed=10 + i), rand(B, H, M, D, seed=20 + i), rand(B, H, M, Dv, seed=30 + i)
    E = rand(H, k, n, seed=40 + i) if per_head else rand(k, n, seed=40 + i)
    return q, kk, v, E, rand(k, n, seed=50 + i)


@CHAPTER.task("3.2", "linformer_forward")
def linformer_forward(f):
    """Linformer attention softmax(q (E k)ᵀ / √D) (F v)"""
    ref = linformer.linformer_attention
    for per_head in (False, True):
        pairs = []
        for i, shape in enumerate(FWD_SHAPES):
            q, k, v, E, F = _forward_inputs(i, *shape, per_head=per_head)
            pairs.append((f(q, k, v, E, F), ref(q, k, v, E, F)))
        yield all_close(pairs, "minilin.linformer.linformer_attention(q, k, v, E, F) with "
                               + ("one E per head (H, k, seq_len)" if per_head else "shared E, F (k, seq_len)"))
    pairs = []
    for i, shape in enumerate(FWD_SHAPES):
        q, k, v, E, F = _forward_inputs(i, *shape)
        B, M = shape[0], shape[3]
        mask = lengths_mask(*[M - b for b in range(B)], M=M)
        pairs.append((f(q, k, v, E, F, mask=mask), ref(q, k, v, E, F, mask=mask)))
    yield all_close(pairs, "minilin.linformer.linformer_attention(q, k, v, E, F, mask=mask), padded sequences")
    pairs = []
    for i, shape in enumerate(FWD_SHAPES):
        q, k, v, _, _ = _forward_inputs(i, *shape)
        eye = torch.eye(shape[3], dtype=torch.float64)  # k = n = M and E = F = I: exact attention
        pairs.append((f(q, k, v, eye, eye), softmax_attention(q, k, v)))
    yield all_close(pairs, "exact attention (E = F = identity)")
    q1 = rand(2, 2, 6, 3, seed=8)
    yield raises(f(q1, q1, q1, rand(2, 5, seed=9), rand(2, 5, seed=10)), "ValueError",
                 why="(6 keys but E, F have only 5 columns: Linformer has a fixed maximum length)")


def signals(batch, n, freqs, seed):
    """(noisy, coefficients): sums of `freqs` sinusoids (minilin.denoise) and their 2·freqs cosine/sine amplitudes."""
    from minilin.denoise import smooth_signal_batch
    x, y = smooth_signal_batch(batch, n, torch.Generator().manual_seed(seed), freqs=freqs)
    c = torch.fft.rfft(y.double(), dim=-1)[:, 1:freqs + 1] * (2 / n)
    return x.double(), torch.cat([c.real, c.imag], dim=-1)


def probe_r2(x, coeffs, k):
    """Reference for Task 3.3: R^2 of least squares (with a bias) from the top-k principal coordinates of x."""
    xc = x - x.mean(0)
    _, _, Vh = torch.linalg.svd(xc, full_matrices=False)
    A = torch.cat([xc @ Vh[:k].T, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)
    W = torch.linalg.lstsq(A, coeffs, driver="gelsd").solution
    return float(1 - ((A @ W - coeffs) ** 2).sum() / ((coeffs - coeffs.mean(0)) ** 2).sum())


# (batch, n, freqs, seed): sums of 2, 3 and 6 sinusoids (the notebook used 4) at two lengths
PROBE_CASES = ((400, 64, 2, 1), (500, 96, 3, 2), (600, 64, 6, 3))


def number(call, got, exp, what, atol):
    problem = compare(got, exp, atol=atol)
    if problem:
        raise Failure(f"{call.describe()}\n  {problem} ({what})")


@CHAPTER.task("3.3", "slot_probe_r2")
def slot_probe_r2(f):
    """how much of a signal's coefficients k principal slots carry (R^2)"""
    for batch, n, freqs, seed in PROBE_CASES:
        x, c = signals(batch, n, freqs, seed)
        ks = (1, freqs, 2 * freqs, 2 * freqs + 3)
        pairs = [(f(x, c, k), probe_r2(x, c, k)) for k in ks]

        def judge(*got, pairs=pairs, freqs=freqs, n=n):
            for (call, exp), g in zip(pairs, got):
                number(call, g, exp, f"the probe's R^2 on sums of {freqs} sinusoids, n = {n}", 1e-6)
        yield check(*[call for call, _ in pairs], judge=judge)


# (batch, n, freqs, seed, share)
NEEDED_CASES = ((400, 64, 2, 4, 0.9), (500, 96, 3, 5, 0.9), (500, 64, 5, 6, 0.9), (500, 96, 3, 7, 0.5))


@CHAPTER.task("3.4", "slots_needed")
def slots_needed(f):
    """the smallest k whose slots carry a share of the coefficients"""
    for batch, n, freqs, seed, share in NEEDED_CASES:
        x, c = signals(batch, n, freqs, seed)
        exp = next((k for k in range(1, n + 1) if probe_r2(x, c, k) >= share), n + 1)
        yield equal(f(x, c, share), exp, what=f"the grader's smallest k with probe R^2 >= {share} (sums of {freqs} "
                                              f"sinusoids, {2 * freqs} coefficients, n = {n})")


# ---- extend tasks: the idea on cases notebook 03 does not solve ------------------------------------------
def window_by_loop(q, k, v, w):
    """Loop reference for Task 3.5: query t attends, in one softmax, to the mean key/value of every completed
    window before its own and to each key/value of its own window at positions s <= t."""
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    for t in range(q.shape[2]):
        start = (t // w) * w
        parts = [(k[:, :, u:u + w].mean(2), v[:, :, u:u + w].mean(2)) for u in range(0, start, w)]
        parts += [(k[:, :, s], v[:, :, s]) for s in range(start, t + 1)]
        K = torch.stack([a for a, _ in parts], dim=2)  # (B, H, slots + own, D)
        V = torch.stack([b for _, b in parts], dim=2)
        a = torch.softmax(q[:, :, t, None] @ K.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        out[:, :, t] = (a @ V)[:, :, 0]
    return out


# (B, H, n, D, Dv, window): windows that divide n, then windows that do not (the last window shorter)
WINDOW_DIVIDES = ((2, 3, 12, 4, 3, 3), (1, 2, 16, 6, 6, 4))
WINDOW_REST = ((2, 2, 10, 4, 5, 3), (3, 1, 11, 5, 2, 4))


def _window_inputs(B, H, n, D, Dv, seed):
    return rand(B, H, n, D, seed=seed), rand(B, H, n, D, seed=seed + 1), rand(B, H, n, Dv, seed=seed + 2)


@CHAPTER.task("3.5", "causal_window_linformer", extend=True)
def causal_window_linformer(f):
    """a causal Linformer: pooled slots of completed windows plus exact attention inside the current one"""
    exact = []
    for i, (B, H, n, D, Dv, _) in enumerate(WINDOW_DIVIDES + WINDOW_REST):
        q, k, v = _window_inputs(B, H, n, D, Dv, seed=80 + 3 * i)
        exact.append((f(q, k, v, 1 if i % 2 == 0 else n + i), softmax_attention(q, k, v, causal=True)))
    yield all_close(exact, "exact causal attention (window = 1: every slot is one key; window >= n: one window)")
    for cases, what in ((WINDOW_DIVIDES, "windows that divide n"), (WINDOW_REST, "windows that do not divide n")):
        pairs = []
        for i, (B, H, n, D, Dv, w) in enumerate(cases):
            q, k, v = _window_inputs(B, H, n, D, Dv, seed=100 + 3 * i + len(what))
            pairs.append((f(q, k, v, w), window_by_loop(q, k, v, w)))
        yield all_close(pairs, f"a loop over the queries (pooled completed windows + own window up to t), {what}")
    B, H, n, D, Dv, w = WINDOW_REST[0]
    q, k, v = _window_inputs(B, H, n, D, Dv, seed=130)
    t0 = 6  # inside a window: the rest of that window and all later windows are the future
    q2, k2, v2 = (x.clone() for x in (q, k, v))
    for x, seed in ((q2, 131), (k2, 132), (v2, 133)):
        x[:, :, t0 + 1:] = rand(*x[:, :, t0 + 1:].shape, seed=seed, scale=100.0)
    expected = window_by_loop(q, k, v, w)[:, :, :t0 + 1]
    call = f(q2, k2, v2, w)

    def judge(got):
        if not isinstance(got, torch.Tensor) or got.shape != (B, H, n, Dv):
            raise Failure(f"{call.describe()}\n  expected a tensor of shape {(B, H, n, Dv)}, got {kind(got)}")
        expect_close(got[:, :, :t0 + 1], expected, call=call, atol=1e-10,
                     what=f"the loop reference on the unchanged inputs, outputs 0..{t0} (the inputs after "
                          f"position {t0} were replaced by others 100 times larger: a causal layer ignores them)")
    yield check(call, judge=judge)
    q1 = rand(1, 1, 4, 2, seed=8)
    yield raises(f(q1, q1, q1, 0), "ValueError", why="(a window of 0 positions holds no key)")


FLOP_SHAPES = ((2, 3, 64, 64, 16, 16, 8), (1, 2, 40, 96, 8, 24, 12), (4, 1, 100, 30, 32, 5, 6))


class MatmulFlops(torch.overrides.TorchFunctionMode):
    """Counts matrix-product FLOPs as torch.utils.flop_counter.FlopCounterMode does (2·a·b·c for an (a, b) @ (b, c)
    product, once per broadcast batch entry), without the torch._dynamo import FlopCounterMode costs (seconds)."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("matmul", "__matmul__", "__rmatmul__", "mm", "bmm"):
            a, b = (args[1], args[0]) if name == "__rmatmul__" else args[:2]
            batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            self.flops += 2 * math.prod(batch) * a.shape[-2] * a.shape[-1] * b.shape[-1]
        elif name in ("einsum", "tensordot", "linear", "baddbmm", "addmm"):
            raise CannotGrade(f"the FLOP count does not handle {name}")
        return func(*args, **(kwargs or {}))


def linformer_flops(B, H, N, M, D, Dv, k):
    """The matmul FLOPs of minilin's linformer_attention (run on small zero tensors: the count needs shapes)."""
    zeros = lambda *s: torch.zeros(*s, dtype=torch.float64)
    with MatmulFlops() as counter:
        linformer.linformer_attention(zeros(B, H, N, D), zeros(B, H, M, D), zeros(B, H, M, Dv), zeros(k, M),
                                      zeros(k, M))
    return counter.flops


@CHAPTER.task("3.6", "linformer_matmul_flops", extend=True)
def linformer_matmul_flops(f):
    """matmul FLOPs of Linformer cross-attention, N != M and Dv != D"""
    for i, shape in enumerate(FLOP_SHAPES):
        B, H, N, M, D, Dv, k = shape
        yield equal(f(B, H, N, M, D, Dv, k), linformer_flops(*shape),
                    what=f"the matmul FLOPs of minilin.linformer.linformer_attention, counted as FlopCounterMode "
                         f"counts them (B={B}, H={H}, N={N}, M={M}, D={D}, Dv={Dv}, k={k})")
