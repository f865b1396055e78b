"""Checks for exercises/ex04_performer.py (Tasks 4.1-4.4), against minilin.performer."""
import math

import torch

from minilin.grading.calls import Gen
from minilin.grading.checks import Chapter, check, close, expect, expect_close, gen, kind, rand
from minilin.performer import causal_linear_attention as reference_causal
from minilin.performer import favor_attention, gaussian_projection, positive_features

CHAPTER = Chapter(4, "ex04_performer", "Performer (FAVOR+) from scratch")


def tensor(call, got, shape=None, dtype=None):
    ok = isinstance(got, torch.Tensor) and (shape is None or tuple(got.shape) == shape)
    ok = ok and (dtype is None or got.dtype == dtype)
    expect(ok, call, f"returned {kind(got)}, expected a tensor" + (f" of shape {shape}" if shape else "") +
           (f" ({dtype})" if dtype else ""))


@CHAPTER.task("4.1", "positive_random_features")
def positive_random_features(f):
    """Lemma 1's positive random features, unbiased for exp(xᵀy)"""
    x = rand(2, 3, 5, 4, seed=1, scale=0.7)
    w = gaussian_projection(6, 4, generator=gen(2), dtype=torch.float64)
    yield close(f(x, w), positive_features(x, w, is_query=False, stabilize=False, normalize=False),
                what="exp(Wx - |x|²/2) / √m", atol=0.0, rtol=1e-12)
    # Seeds 3/4/5: 20000 features of d=3 for 2 pairs; the mean of φ(x)·φ(y) over 200 groups of 100 features
    # must be within 4 standard errors of exp(xᵀy).
    x, y = rand(2, 3, seed=3, scale=0.5), rand(2, 3, seed=4, scale=0.5)
    w = torch.randn(20000, 3, generator=gen(5), dtype=torch.float64)
    fx, fy = f(x, w), f(y, w)

    def unbiased(px, py):
        tensor(fx, px, (2, 20000))
        tensor(fy, py, (2, 20000))
        est = (px * py).view(2, 200, 100).sum(-1) * 200  # (pairs, groups): each group an m=100 estimate
        truth = torch.exp((x * y).sum(-1))
        se = est.std(-1) / math.sqrt(200)
        err = (est.mean(-1) - truth).abs()
        expect(bool((err <= 4 * se).all()), "φ(x)·φ(y) with 20000 Gaussian features",
               f"mean estimate off by {err.tolist()}, more than 4 standard errors {(4 * se).tolist()} "
               f"of exp(xᵀy) = {truth.tolist()}: the features are biased")
    yield check(fx, fy, judge=unbiased)


@CHAPTER.task("4.2", "orthogonal_projection")
def orthogonal_projection(f):
    """block-orthogonal Gaussian rows with chi(D) lengths"""
    call, again = f(10, 4, Gen(6)), f(10, 4, Gen(6))

    def blocks(w, w2):
        tensor(call, w, (10, 4), torch.float64)
        unit = w / w.norm(dim=1, keepdim=True)
        for name, block in (("rows 0-3", unit[0:4]), ("rows 4-7", unit[4:8]), ("rows 8-9", unit[8:10])):
            expect_close(block @ block.T, torch.eye(len(block), dtype=torch.float64), call=call, atol=1e-12,
                         what=f"the identity: {name} are one block, orthonormal after normalising")
        expect(float((unit[0:4] @ unit[4:8].T).abs().max()) > 1e-3, call,
               "blocks 1 and 2 are orthogonal to each other: each block must be an independent draw")
        expect(float(w.norm(dim=1).std()) > 0.05, call, "all rows have the same length: draw chi(D) lengths")
        expect_close(w2, w, call=again, atol=0.0, what="the first draw with the same seed (use the generator)")
    yield check(call, again, judge=blocks)
    # E[w wᵀ] = I for a row with a uniform direction and chi(D) length (unit rows would give I/3).
    # Seed 7, 900 rows of D=3: entries of the sample second moment have standard error <= sqrt(2/900)
    # = 0.047; 0.2 is > 4 of them, and 3x smaller than the I/3 mistake.
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
    q, k, v = rand(2, 2, 7, 8, seed=8), rand(2, 2, 9, 8, seed=9), rand(2, 2, 9, 3, seed=10)
    w = gaussian_projection(16, 8, generator=gen(11), dtype=torch.float64)
    yield close(f(q, k, v, w), favor_attention(q, k, v, w), what="minilin.performer.favor_attention(q, k, v, w)")
    g = gen(12)
    q, k = (torch.empty(1, 2, 30, 16).uniform_(-20, 20, generator=g) for _ in range(2))
    v = torch.randn(1, 2, 30, 4, generator=g)
    w = gaussian_projection(32, 16, generator=gen(13))
    ref = favor_attention(q.double(), k.double(), v.double(), w.double())
    ok = torch.isfinite(ref).all(-1) & (ref.abs().sum(-1) > 0)  # rows that float64 itself resolves
    call = f(q, k, v, w)

    def stable(got):
        tensor(call, got, (1, 2, 30, 4))
        expect(bool(torch.isfinite(got).all()), call, "inf or NaN in float32 with |x| up to 20: subtract the "
               "maxima before exp (queries: per row; keys: one max over all keys and features)")
        expect_close(got.double()[ok], ref[ok], call=call, atol=1e-3, dtype=False,
                     what="favor_attention in float64 (rows float64 resolves)")
    yield check(call, judge=stable)


@CHAPTER.task("4.4", "causal_linear_attention")
def causal_linear_attention(f):
    """causal linear attention by prefix sums, with no leak from the future"""
    g = gen(14)
    phi_q = torch.rand(2, 3, 11, 5, generator=g, dtype=torch.float64)
    phi_k = torch.rand(2, 3, 11, 5, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, 11, 4, generator=g, dtype=torch.float64)
    yield close(f(phi_q, phi_k, v), reference_causal(phi_q, phi_k, v, chunk_size=4),
                what="minilin.performer.causal_linear_attention")
    a = (phi_q @ phi_k.transpose(-2, -1)).tril()  # the quadratic form it must equal
    yield close(f(phi_q, phi_k, v), (a / a.sum(-1, keepdim=True)) @ v, what="the masked quadratic form")
    yield no_future_leak(f, lambda x: (x[..., :4].abs() + 0.1, x[..., 4:8].abs() + 0.1, x[..., 8:]),
                         rand(1, 1, 8, 10, seed=16), "φ(q), φ(k) and v")


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
