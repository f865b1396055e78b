"""Checks for exercises/ex04_performer.py (Tasks 4.1-4.7), against minilin.performer."""
import math

import torch

from minilin.grading.calls import Gen
from minilin.grading.checks import (Chapter, captured, check, expect, expect_close, gen, kind, nonfinite_words, rand,
                                    raises)
from minilin.grading.favor_refs import (float32_reach, hyperbolic, hyperbolic_var, lemma2_mse, masked_quadratic,
                                        theorem2_cap, unstabilised_causal, window_quadratic)
from minilin.performer import causal_linear_attention as reference_causal
from minilin.performer import favor_attention, gaussian_projection

CHAPTER = Chapter(4, "ex04_performer", "Performer (FAVOR+) from scratch")


def tensor(call, got, shape=None, dtype=None, finite=True):
    """A tensor of that shape and dtype, and (`finite`) with no NaN or inf: the checks that compare a learner's
    outputs with each other (the future must not leak, the same seed gives the same draw) would find NaN equal
    to NaN."""
    ok = isinstance(got, torch.Tensor) and (shape is None or tuple(got.shape) == shape)
    ok = ok and (dtype is None or got.dtype == dtype)
    expect(ok, call, f"returned {kind(got)}, expected a tensor" + (f" of shape {shape}" if shape else "") +
           (f" ({dtype})" if dtype else ""))
    if finite and got.is_floating_point() and not bool(torch.isfinite(got).all()):
        expect(False, call, f"returned {nonfinite_words(got[~torch.isfinite(got)])} in "
                            f"{int((~torch.isfinite(got)).sum())} of {got.numel()} entries; expected finite numbers")


def all_close(pairs, what, atol=1e-10, rtol=0.0):
    """One Step: every (call, expected) pair must match; the failure names the first call that does not."""
    def judge(*results):
        for (call, exp), got in zip(pairs, results):
            expect_close(got, exp, call=call, what=what, atol=atol, rtol=rtol)
    return check(*[c for c, _ in pairs], judge=judge)


def not_quadratic(call, n, m):
    """A step: no matrix product during `call` with both last dimensions >= n/2 and >= m/2, and no tensor of N·M/2
    elements or more (a score matrix built by broadcasting): nothing the size of the (N, M) matrix (Tasks 4.3, 4.4)."""
    spy = captured(call, "matmul_shapes")

    def judge(got):
        big = [p for p in got["products"] if min(p) >= min(n, m) // 2 and max(p) >= max(n, m) // 2]
        expect(not big, spy, f"computed matrix products of shape {sorted(set(big))[:3]} for N = {n}, M = {m}: "
                             f"the cost grows like N·M (quadratic); use the associativity of the products")
        largest = got.get("largest", 0)
        expect(largest < n * m // 2, spy, f"an intermediate tensor of {largest} elements for N = {n}, M = {m} "
                                          f"(N·M = {n * m}): something the size of the attention matrix was built "
                                          f"(broadcasting counts too); sum over the keys first")
    return check(spy, judge=judge)


def grows_linearly(small, big, grow):
    """A step: `big` is `small` with N and M `grow` times larger. The largest tensor and matrix product may grow
    grow**1.5 times: linear memory (a prefix state per position, N·m·Dv) grows `grow` times, an (N, M) matrix grow²."""
    spies = [captured(c, "matmul_shapes") for c in (small, big)]

    def judge(a, b):
        area = lambda got: max((r * c for r, c in got["products"]), default=0)
        for what, before, after in (("the largest intermediate tensor", a.get("largest", 0), b.get("largest", 0)),
                                     ("the largest matrix product", area(a), area(b))):
            expect(after <= grow ** 1.5 * max(before, 1), spies[1],
                   f"{what} grew from {before} to {after} elements ({after / max(before, 1):.1f} times) when N and "
                   f"M grew {grow} times: linear memory grows {grow} times, an (N, M) matrix {grow * grow} times "
                   f"(broadcasting counts too); sum over the keys first")
    return check(*spies, judge=judge)


@CHAPTER.task("4.1", "hyperbolic_random_features", "hyperbolic_variance")
def hyperbolic_random_features(f, var):
    """the positive hyperbolic features: unbiased for exp(xᵀy), and their variance derived"""
    pairs = []
    for i, (shape, m) in enumerate((((2, 3, 5, 4), 6), ((3, 2, 7, 6), 9), ((5, 3), 4))):
        x = rand(*shape, seed=1 + i, scale=0.7)
        w = gaussian_projection(m, shape[-1], generator=gen(2 + i), dtype=torch.float64)
        pairs.append((f(x, w), hyperbolic(x, w)))
    yield all_close(pairs, "exp(−|x|²/2) / √(2m) · [exp(Wx), exp(−Wx)], shape (..., N, 2m)", atol=0.0, rtol=1e-12)
    # Seeds 3/4/5: 20000 directions of d=3, 2 pairs; the mean over 200 groups of 100 within 4 s.e. of exp(xᵀy)
    x, y = rand(2, 3, seed=3, scale=0.5), rand(2, 3, seed=4, scale=0.5)
    w = torch.randn(20000, 3, generator=gen(5), dtype=torch.float64)
    fx, fy = f(x, w), f(y, w)

    def unbiased(px, py):
        tensor(fx, px, (2, 40000)), tensor(fy, py, (2, 40000))
        est = (px * py).view(2, 2, 200, 100).sum((1, 3)) * 200  # (pairs, groups): each an m=100 estimate
        truth = torch.exp((x * y).sum(-1))
        se = est.std(-1) / math.sqrt(200)
        err = (est.mean(-1) - truth).abs()
        expect(bool((err <= 4 * se).all()), "φ(x)·φ(y) with 20000 Gaussian directions",
               f"mean estimate off by {err.tolist()}, more than 4 standard errors {(4 * se).tolist()} "
               f"of exp(xᵀy) = {truth.tolist()}: the features are biased")
    yield check(fx, fy, judge=unbiased)
    # Seeds 6/7/8: variance of 10000 m = 8 estimates within 40% of the hyperbolic one (fresh draws: <= 28%)
    x2, y2 = rand(2, 3, seed=6), rand(2, 3, seed=7)  # new names: the judges run later
    x2, y2 = (0.6 * t / t.norm(dim=-1, keepdim=True) for t in (x2, y2))  # a fixed length: light tails
    w2 = torch.randn(80000, 3, generator=gen(8), dtype=torch.float64)
    gx, gy = f(x2, w2), f(y2, w2)

    def less_variance(px, py):
        tensor(gx, px, (2, 160000)), tensor(gy, py, (2, 160000))
        est = (px * py).view(2, 2, 10000, 8).sum((1, 3)) * 10000  # (pairs, estimates): m = 8 directions each
        s2 = ((x2 + y2) ** 2).sum(-1)
        plus = torch.exp(2 * (x2 * y2).sum(-1)) * torch.expm1(s2) / 8  # Lemma 2: φ+ with 8 directions
        want = hyperbolic_var(x2, y2, 8)
        got = est.var(-1)
        expect(bool(((got / want - 1).abs() <= 0.40).all()), "the variance of 10000 estimates, 8 directions each",
               f"variance {got.tolist()}, expected {want.tolist()} (within 40%; φ+ with 8 directions: {plus.tolist()})")
    yield check(gx, gy, judge=less_variance)
    # Part 2, the derivation: fresh pairs whose norms run from 0.2 to 1.4 (a constant, or φ+'s variance, fails)
    pairs = []
    for i, (shape, m) in enumerate((((5, 4), 8), ((2, 3, 6), 1), ((7, 3), 100))):
        norms = torch.linspace(0.2, 1.4, shape[-2], dtype=torch.float64)[:, None]
        x3, y3 = (torch.nn.functional.normalize(rand(*shape, seed=s_ + 2 * i), dim=-1) * norms for s_ in (9, 10))
        pairs.append((var(x3, y3, m), hyperbolic_var(x3, y3, m)))
    yield all_close(pairs, "the exact variance of φ(x)·φ(y) with m iid directions, shape (...)", atol=0.0, rtol=1e-9)


ORTHO_SHAPES = ((10, 4), (13, 5))  # m not a multiple of D: the last block is shorter


@CHAPTER.task("4.2", "orthogonal_projection")
def orthogonal_projection(f):
    """block-orthogonal Gaussian rows with chi(D) lengths"""
    calls = [f(m, d, Gen(6 + i)) for i, (m, d) in enumerate(ORTHO_SHAPES)]

    def shapes(*got):
        for call, (m, d), w in zip(calls, ORTHO_SHAPES, got):
            tensor(call, w, (m, d), torch.float64)
    yield check(*calls, judge=shapes)

    def orthonormal(*got):
        shapes(*got)
        for call, (m, d), w in zip(calls, ORTHO_SHAPES, got):
            unit = w / w.norm(dim=1, keepdim=True)
            for start in range(0, m, d):
                block = unit[start:start + d]
                expect_close(block @ block.T, torch.eye(len(block), dtype=torch.float64), call=call, atol=1e-12,
                             what=f"the identity: rows {start}-{start + len(block) - 1} are one block, "
                                  f"orthonormal after normalising")
    yield check(*calls, judge=orthonormal)

    def independent(*got):
        shapes(*got)
        for call, (m, d), w in zip(calls, ORTHO_SHAPES, got):
            unit = w / w.norm(dim=1, keepdim=True)
            expect(float((unit[0:d] @ unit[d:2 * d].T).abs().max()) > 1e-3, call,
                   "blocks 1 and 2 are orthogonal to each other: each block must be an independent draw")
    yield check(*calls, judge=independent)
    again = f(10, 4, Gen(6))

    def same_seed(w, w2):
        tensor(calls[0], w, (10, 4), torch.float64)
        expect_close(w2, w, call=again, atol=0.0, what="the first draw with the same seed (use the generator)")
    yield check(calls[0], again, judge=same_seed)
    # chi(D) lengths, seed 8, D = 4: |w|² < 2, 4, 8 within 4 s.e. of the chi²(4) CDF (unit or √D rows fail)
    many = f(8000, 4, Gen(8))

    def chi(w):
        tensor(many, w, (8000, 4), torch.float64)
        sq = (w * w).sum(-1)
        for x in (2.0, 4.0, 8.0):
            p = float(torch.special.gammainc(torch.tensor(2.0, dtype=torch.float64), torch.tensor(x / 2)))
            got, se = float((sq < x).double().mean()), math.sqrt(p * (1 - p) / 8000)
            expect(abs(got - p) <= 4 * se, many, f"fraction of rows with |w|² < {x:g}: {got:.4f}, expected the "
                   f"chi²(4) probability {p:.4f} ± {4 * se:.4f} (4 standard errors): row lengths must be chi(D) "
                   f"draws, one per row")
        per_block = sq.view(2000, 4)
        spread = float((per_block.std(-1) / per_block.mean(-1)).mean())
        expect(spread > 0.2, many, f"the rows of a block have nearly equal lengths (mean relative spread "
                                   f"{spread:.3f}): draw one length per row, not per block")
    yield check(many, judge=chi)
    # Uniform directions, seed 9: each entry negative in 0.5 ± 0.045 of 2000 blocks (QR's signs unfixed fail)
    signs = f(8000, 4, Gen(9))

    def symmetric(w):
        tensor(signs, w, (8000, 4), torch.float64)
        negative = (w.view(2000, 4, 4) < 0).double().mean(0)  # (row in block, coordinate)
        worst = float((negative - 0.5).abs().max())
        i, j = divmod(int((negative - 0.5).abs().argmax()), 4)
        expect(worst <= 0.045, signs, f"entry ({i}, {j}) of a block is negative in {float(negative[i, j]):.1%} "
               f"of 2000 blocks, expected 50% ± 4.5%: the directions are not uniform (fix the signs of QR)")
    yield check(signs, judge=symmetric)
    # E[w wᵀ] = I, seed 7, 900 rows of D = 3: s.e. <= 0.047, so 0.2 is > 4 of them (unit rows give I/3)
    big = f(900, 3, Gen(7))

    def gaussian(w):
        tensor(big, w, (900, 3), torch.float64)
        expect_close(w.T @ w / 900, torch.eye(3, dtype=torch.float64), call=big, atol=0.2,
                     what="E[w wᵀ] = I (rows marginally N(0, I)), as wᵀw / 900")
        expect(abs(float(w.mean())) < 0.2, big, f"mean {float(w.mean()):.3f}, expected |mean| < 0.2")
    yield check(big, judge=gaussian)


@CHAPTER.task("4.3", "favor_noncausal")
def favor_noncausal(f):
    """stabilised non-causal FAVOR+"""
    pairs = []
    for i, (B, H, N, M, D, Dv, m) in enumerate(((2, 2, 7, 9, 8, 3, 16), (3, 2, 5, 11, 4, 5, 6))):
        q, k, v = rand(B, H, N, D, seed=8 + i), rand(B, H, M, D, seed=9 + i), rand(B, H, M, Dv, seed=10 + i)
        w = gaussian_projection(m, D, generator=gen(11 + i), dtype=torch.float64)
        pairs.append((f(q, k, v, w), favor_attention(q, k, v, w)))
    yield all_close(pairs, "minilin.performer.favor_attention(q, k, v, w), float64")
    g = gen(12)
    q, k = (torch.empty(1, 2, 30, 16).uniform_(-20, 20, generator=g) for _ in range(2))
    v = torch.randn(1, 2, 30, 4, generator=g)
    w = gaussian_projection(32, 16, generator=gen(13))
    ref = favor_attention(q.double(), k.double(), v.double(), w.double())
    ok = torch.isfinite(ref).all(-1) & (ref.abs().sum(-1) > 0)  # rows that float64 itself resolves
    call = f(q, k, v, w)

    def stable(got):
        tensor(call, got, (1, 2, 30, 4), torch.float32, finite=False)  # float32 out: no upcast hides overflow
        expect(bool(torch.isfinite(got).all()), call, "inf or NaN in float32 with |x| up to 20: subtract the "
               "maxima before exp (queries: per row; keys: one max over all keys and features)")
        expect_close(got.double()[ok], ref[ok], call=call, atol=1e-3, dtype=False,
                     what="favor_attention in float64 (rows float64 resolves)")
    yield check(call, judge=stable)
    q, k, v = rand(1, 2, 48, 4, seed=14), rand(1, 2, 64, 4, seed=15), rand(1, 2, 64, 3, seed=16)
    yield not_quadratic(f(q, k, v, gaussian_projection(8, 4, generator=gen(17), dtype=torch.float64)), 48, 64)


def features(B, H, N, M, m, Dv, seed):
    g = gen(seed)
    return (torch.rand(B, H, N, m, generator=g, dtype=torch.float64) + 0.05,
            torch.rand(B, H, M, m, generator=g, dtype=torch.float64) + 0.05,
            torch.randn(B, H, M, Dv, generator=g, dtype=torch.float64))


@CHAPTER.task("4.4", "sliding_window_linear_attention")
def sliding_window_linear_attention(f):
    """linear attention over the last `window` keys, by prefix sums, with no leak from the future"""
    cases = (((2, 3, 11, 5, 4), 3), ((3, 2, 6, 3, 2), 1), ((2, 2, 9, 4, 3), 5))  # (B, H, N, m, Dv), window
    inputs = [(features(B, H, N, N, m, Dv, seed=14 + i), wnd) for i, ((B, H, N, m, Dv), wnd) in enumerate(cases)]
    yield all_close([(f(*x, wnd), window_quadratic(*x, wnd)) for x, wnd in inputs],
                    "the window-masked quadratic form (a loop: query i sees keys i − window < j <= i)")
    whole = [features(B, H, N, N, m, Dv, seed=20 + i) for i, ((B, H, N, m, Dv), _) in enumerate(cases[:2])]
    yield all_close([(f(*x, x[0].shape[2] + 2), reference_causal(*x, chunk_size=4)) for x in whole],
                    "minilin.performer.causal_linear_attention (a window longer than the sequence)")
    yield no_future_leak(f, lambda x: (x[..., :4].abs() + 0.1, x[..., 4:8].abs() + 0.1, x[..., 8:]),
                         rand(1, 1, 8, 10, seed=16), "φ(q), φ(k) and v", window=3)
    yield not_quadratic(f(*features(1, 2, 96, 96, 4, 3, seed=18), 40), 96, 96)


def no_future_leak(f, unpack, x, what, **kwargs):
    """A step: changing positions >= s (of every input) must leave outputs < s unchanged, for every s."""
    calls = []
    for s in range(x.shape[2]):
        xs = x.clone()
        if s:
            xs[:, :, s:] = rand(*xs[:, :, s:].shape, seed=100 + s)
        calls.append(f(*unpack(xs), **kwargs))

    def judge(base, *others):
        tensor(calls[0], base)
        for s, got in enumerate(others, start=1):
            tensor(calls[s], got, tuple(base.shape))
            expect_close(got[:, :, :s], base[:, :, :s], call=calls[s], atol=1e-12,
                         what=f"the outputs before position {s} with the original inputs: changing {what} at "
                              f"positions >= {s} changed an earlier output, so the future leaks")
    return check(*calls, judge=judge)


# ---- extend tasks: the idea on cases notebook 04 does not solve ------------------------------------------
@CHAPTER.task("4.5", "favor_causal", extend=True)
def favor_causal(f):
    """causal FAVOR+ whose stabiliser never reads the future"""
    pairs = []
    for i, (B, H, N, D, Dv, m) in enumerate(((2, 3, 9, 8, 3, 16), (3, 2, 12, 4, 5, 6))):
        q, k, v = (rand(B, H, N, d, seed=30 + 3 * i + j, scale=0.6) for j, d in enumerate((D, D, Dv)))
        w = gaussian_projection(m, D, generator=gen(40 + i), dtype=torch.float64)
        pairs.append((f(q, k, v, w), unstabilised_causal(q, k, v, w)))
    yield all_close(pairs, "the unstabilised causal FAVOR+ estimate (float64 features, a loop over queries)")
    # bit for bit: scaling the keys from position s on by 4 raises any maximum taken over all keys, which a
    # stabiliser that reads the future would feel at every earlier position (in round-off at least)
    q, k, v = rand(2, 2, 10, 8, seed=50), rand(2, 2, 10, 8, seed=51), rand(2, 2, 10, 3, seed=52)
    w = gaussian_projection(16, 8, generator=gen(53), dtype=torch.float64)
    cuts = (1, 4, 7, 9)
    base, later = f(q, k, v, w), []
    for s in cuts:
        k_s = k.clone()
        k_s[:, :, s:] *= 4.0
        later.append(f(q, k_s, v, w))

    def untouched(b, *others):
        tensor(base, b, (2, 2, 10, 3))
        for s, call, got in zip(cuts, later, others):
            tensor(call, got, (2, 2, 10, 3))
            expect_close(got[:, :, :s], b[:, :, :s], call=call, atol=0.0,
                         what=f"the outputs before position {s} with the original keys (bit for bit): scaling the "
                              f"keys at positions >= {s} by 4 changed an earlier output, so the stabiliser reads "
                              f"the future")
    yield check(base, *later, judge=untouched)
    g = gen(54)
    q, k = (torch.empty(1, 2, 30, 16).uniform_(-20, 20, generator=g) for _ in range(2))
    v = torch.randn(1, 2, 30, 4, generator=g)
    w = gaussian_projection(32, 16, generator=gen(55))
    ref = favor_attention(q.double(), k.double(), v.double(), w.double(), causal=True)
    ok = torch.isfinite(ref).all(-1) & (ref.abs().sum(-1) > 0)  # rows that float64 itself resolves
    ok &= ((float32_reach(q, k, v, w) - ref).abs().amax(-1) <= 1e-4).nan_to_num(False)  # and float32, stabilised
    call = f(q, k, v, w)

    def stable(got):
        tensor(call, got, (1, 2, 30, 4), torch.float32, finite=False)  # float32 out: no upcast hides overflow
        expect(bool(torch.isfinite(got).all()), call, "inf or NaN in float32 with entries up to ±20: scale each "
               "key by a running maximum of the exponents of the keys so far, each query by its own row maximum")
        expect_close(got.double()[ok], ref[ok], call=call, atol=1e-3, dtype=False,
                     what="favor_attention(..., causal=True) in float64 (rows float64 resolves)")
    yield check(call, judge=stable)
    w = gaussian_projection(8, 4, generator=gen(59), dtype=torch.float64)
    runs = [f(rand(1, 2, n, 4, seed=56), rand(1, 2, n, 4, seed=57), rand(1, 2, n, 3, seed=58), w) for n in (96, 384)]
    yield grows_linearly(*runs, 4)


PREFIX_SHAPES = ((2, 3, 5, 9, 4, 3), (3, 2, 7, 7, 6, 2), (2, 2, 3, 11, 3, 4))  # (B, H, N, M, m, Dv), N <= M


@CHAPTER.task("4.6", "causal_prefix_attention", extend=True)
def causal_prefix_attention(f):
    """causal linear attention for N queries that are the last N of M positions"""
    inputs = [features(*s, seed=60 + i) for i, s in enumerate(PREFIX_SHAPES)]
    yield all_close([(f(*x), masked_quadratic(*x)) for x in inputs],
                    "the bottom-right masked quadratic form (a loop: query i sees keys j <= i + M - N)")
    yield all_close([(f(*x), reference_causal(*x, chunk_size=3)) for x in inputs],
                    "minilin.performer.causal_linear_attention (bottom-right aligned)")
    single = [features(B, H, 1, M, m, Dv, seed=70 + i) for i, (B, H, _, M, m, Dv) in enumerate(PREFIX_SHAPES)]
    pairs = []
    for pq, pk, v in single:
        a = pq @ pk.transpose(-2, -1)  # (B, H, 1, M): the last position sees every key
        pairs.append((f(pq, pk, v), (a / a.sum(-1, keepdim=True)) @ v))
    yield all_close(pairs, "non-causal linear attention over all M keys (N = 1: the last position)")
    pq, pk, v = features(1, 2, 4, 9, 3, 2, seed=80)
    calls = []
    for t in range(4):  # change everything query t may not see: keys and values after t + M - N, later queries
        pq_t, pk_t, v_t = pq.clone(), pk.clone(), v.clone()
        pk_t[:, :, t + 6:] = pk_t[:, :, t + 6:] * 3 + 0.5
        v_t[:, :, t + 6:] = rand(1, 2, 3 - t, 2, seed=81 + t)
        pq_t[:, :, t + 1:] = pq_t[:, :, t + 1:] * 2
        calls.append(f(pq_t, pk_t, v_t))
    base = f(pq, pk, v)

    def no_leak(b, *others):
        tensor(base, b, (1, 2, 4, 2))
        for t, (call, got) in enumerate(zip(calls, others)):
            tensor(call, got, (1, 2, 4, 2))
            expect_close(got[:, :, :t + 1], b[:, :, :t + 1], call=call, atol=1e-12,
                         what=f"the outputs of queries 0..{t} with the original inputs: changing keys and values "
                              f"after position {t} + M - N = {t + 5} changed them, so the future leaks")
    yield check(base, *calls, judge=no_leak)
    yield grows_linearly(f(*features(1, 2, 64, 96, 4, 3, seed=82)), f(*features(1, 2, 256, 384, 4, 3, seed=82)), 4)
    yield raises(f(*features(1, 1, 5, 3, 2, 2, seed=83)), "ValueError",
                 why="(5 queries but 3 keys: the queries must be the last N of the M positions)")


def pair(d, norm_x, norm_y, seed):
    """(x, y) of dimension d with the given norms, at a random angle whose cosine lies in [-0.5, 0.5]."""
    x, r = rand(d, seed=seed), rand(d, seed=seed + 1)
    x = x / x.norm()
    r = torch.nn.functional.normalize(r - (r @ x) * x, dim=0)
    cos = float(rand(1, seed=seed + 2).clamp(-1.0, 1.0)) * 0.5
    return norm_x * x, norm_y * (cos * x + math.sqrt(1 - cos * cos) * r)


@CHAPTER.task("4.7", "orthogonal_mse")
def orthogonal_mse(f):
    """the MSE of the hyperbolic estimate with iid and with orthogonal rows, against Task 4.1's variance and
    Theorem 2's gap (the same absolute gap as for the positive features)"""
    DRAWS, D = 40000, 8
    pairs = [pair(D, 0.65, 0.7, seed=90), pair(D, 0.7, 0.6, seed=93)]
    # Seeds 100/101: in the (draws, m, D) layout no direction is longer than 6.6; seed 97's one of length 7.4 let
    # about 1 fresh pair in 250 line up with it, and that one draw then held half the iid MSE
    calls = [f(x, y, D, DRAWS, Gen(100 + i)) for i, (x, y) in enumerate(pairs)]

    def iid(*got):
        for call, (x, y), g in zip(calls, pairs, got):
            tensor(call, g, (2,), torch.float64)
            want = float(hyperbolic_var(x, y, D))  # unbiased: MSE = variance
            expect(abs(float(g[0]) / want - 1) <= 0.5, call,
                   f"iid MSE {float(g[0]):.5f}, but the hyperbolic estimate's is {want:.5f} for m = {D} directions "
                   f"(off by {abs(float(g[0]) / want - 1):.0%}, more than 50%): the MSE of the m-direction cosh "
                   f"estimate over the draws, each with its own projection")
    yield check(*calls, judge=iid)

    def orthogonal(*got):
        for call, (x, y), g in zip(calls, pairs, got):
            tensor(call, g, (2,), torch.float64)
            want = float(hyperbolic_var(x, y, D))  # unbiased: MSE = variance
            gap = (1 - theorem2_cap(x, y, D, D)) * lemma2_mse(x, y, D)  # Theorem 2's minimum gain
            ratio = float(g[1] / g[0])
            expect(float(g[1]) <= want - gap + 0.06 * want and ratio <= 0.7, call,
                   f"orthogonal MSE / iid MSE = {ratio:.3f}, orthogonal MSE {float(g[1]):.5f}; Theorem 2 puts it "
                   f"at most {want - gap:.5f} (+{0.06 * want:.5f} for sampling), and the gain must show (ratio "
                   f"<= 0.7): block-orthogonal rows, one block per estimate")
    yield check(*calls, judge=orthogonal)
    x, y = pair(D, 0.6, 0.6, seed=99)
    same = [f(x, y, 4, 2000, Gen(110)), f(x, y, 4, 2000, Gen(110)), f(x, y, 4, 2000, Gen(111))]

    def measured(a, b, c):
        for call, g in zip(same, (a, b, c)):
            tensor(call, g, (2,), torch.float64)
        expect(torch.equal(a, b), same[1], "other numbers than the first call with a generator seeded alike: "
                                           "draw every random number from `generator`")
        expect(not torch.equal(a, c), same[2], "the same numbers for two different seeds: measure by sampling "
                                               "with the generator, do not return a formula")
    yield check(*same, judge=measured)
