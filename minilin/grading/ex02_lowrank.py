"""Checks for exercises/ex02_lowrank.py (Tasks 2.1-2.7), against minilin.lowrank.

Tasks 2.1-2.5 rebuild notebook 02's summaries; 2.6 (the errors of every truncation, in two norms, from the spectrum)
and 2.7 (the energy rank of a causal banded attention map) are extend tasks.
"""
import math

import torch

from minilin import lowrank
from minilin.attention import attention_matrix
from minilin.grading.checks import Chapter, captured, check, close, expect, expect_close, kind, raises, rand

CHAPTER = Chapter(2, "ex02_lowrank", "is attention low rank?")
KNOWN = torch.tensor([3.0, 2.0, 1.0, 1.0, 1.0], dtype=torch.float64)  # squares 9 4 1 1 1, total 16


def spectrum(*batch, n=12, seed=0):
    return lowrank.singular_values(torch.softmax(rand(*batch, n, n, seed=seed) * 2, dim=-1))


@CHAPTER.task("2.1", "cumulative_energy")
def cumulative_energy(f):
    """the normalised cumulative energy of a spectrum"""
    for s, what in ((spectrum(2, 3, seed=1), "a (2, 3, 12) batch"), (spectrum(4, n=20, seed=11), "a (4, 20) batch"),
                    (spectrum(n=7, seed=12), "one spectrum of 7")):
        yield close(f(s), lowrank.cumulative_energy(s), what=f"minilin.lowrank.cumulative_energy(s), s {what}")
    yield close(f(KNOWN), torch.tensor([9, 13, 14, 15, 16], dtype=torch.float64) / 16,
                what="[9, 13, 14, 15, 16] / 16 for s = [3, 2, 1, 1, 1]")


def integer_tensor(call, expected, what):
    """A judge: an integer tensor (any integer dtype) equal to `expected`."""
    def judge(got):
        expect(isinstance(got, torch.Tensor) and not got.is_floating_point(), call,
               f"returned {kind(got)}, expected an integer tensor ({what})")
        expect_close(got.long(), expected, call=call, what=what)
    return judge


@CHAPTER.task("2.2", "rank_at_energy")
def rank_at_energy(f):
    """the smallest rank holding a given share of the energy"""
    for s, shape in ((spectrum(4, seed=2), "(4, 12)"), (spectrum(2, 3, n=20, seed=21), "(2, 3, 20)")):
        for threshold in (0.5, 0.9, 0.99, 1.0):
            call = f(s, threshold)
            yield check(call, judge=integer_tensor(call, lowrank.rank_at_energy(s, threshold),
                                                   f"minilin.lowrank.rank_at_energy(s, {threshold}), s {shape}"))
    call = f(KNOWN, 0.8)

    def two(got):
        value = got.reshape(()).item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
        expect(type(value) is int and value == 2, call,
               f"returned {kind(got)}, expected 2 (the first two values hold 13/16 = 0.8125 >= 0.8)")
    yield check(call, judge=two)


@CHAPTER.task("2.3", "effective_rank")
def effective_rank(f):
    """the entropy effective rank exp(H(p))"""
    for s, shape in ((spectrum(3, seed=3), "(3, 12)"), (spectrum(2, 2, n=7, seed=31), "(2, 2, 7)")):
        yield close(f(s), lowrank.effective_rank(s), what=f"minilin.lowrank.effective_rank(s), s {shape}")
    for r in (4, 7):
        yield close(f(torch.ones(r, dtype=torch.float64)), float(r), what=f"{r} for {r} equal singular values")
    yield close(f(torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64)), 1.0,
                what="1 for a rank-1 spectrum with zeros (0·log 0 = 0, no NaN)")


@CHAPTER.task("2.4", "best_rank_approx")
def best_rank_approx(f):
    """the best rank-r approximation (Eckart-Young)"""
    for P, rs in ((rand(2, 8, 8, seed=4), (1, 3, 8)), (rand(2, 3, 6, 10, seed=41), (2, 5)),
                  (rand(9, 4, seed=42), (1, 3))):
        for r in rs:
            ref = lowrank.best_rank_approx(P, r)
            yield close(f(P, r), ref, what=f"minilin.lowrank.best_rank_approx(P, {r}), P {tuple(P.shape)}")
            call = f(P, r)

            def rank_r(got, call=call, r=r):
                expect(isinstance(got, torch.Tensor) and got.ndim >= 2, call, f"returned {kind(got)}, expected a "
                                                                              f"batch of matrices")
                ranks = torch.linalg.matrix_rank(got).reshape(-1).tolist()
                expect(all(x == r for x in ranks), call, f"numerical ranks {ranks}, expected {r} for each matrix")
            yield check(call, judge=rank_r)


@CHAPTER.task("2.5", "jl_context")
def jl_context(f):
    """P Rᵀ R V without any n x n product"""
    P = torch.softmax(rand(2, 16, 16, seed=5), dim=-1)
    v, R = rand(2, 16, 3, seed=6), rand(5, 16, seed=7) / 5 ** 0.5
    yield close(f(P, v, R), P @ (R.T @ R) @ v, what="P @ (Rᵀ R) @ v, n = 16, k = 5, Dv = 3")
    P = torch.softmax(rand(2, 3, 12, 12, seed=51), dim=-1)
    v, R = rand(2, 3, 12, 4, seed=52), rand(6, 12, seed=53) / 6 ** 0.5
    yield close(f(P, v, R), P @ (R.T @ R) @ v, what="P @ (Rᵀ R) @ v, (B, H) = (2, 3), n = 12, k = 6, Dv = 4")
    # record the (rows, cols) of every matrix product the function forms: none may be n x n
    n = 512
    call = captured(f(torch.softmax(rand(n, n, seed=8), dim=-1), rand(n, 8, seed=9), rand(16, n, seed=10) / 4.0),
                    "matmul_shapes")

    def no_square(got):
        products = got["products"] if isinstance(got, dict) else []
        expect(products, call, "no matrix product was recorded: compute with @ / torch.matmul / einsum")
        expect((n, n) not in products, call, f"an n x n ({n} x {n}) product was formed; products: {products}")
    yield check(call, judge=no_square)


# --- 2.6 (extend): the error of every truncation, in two norms ----------------------------------------------
def truncation_loops(P):
    """‖P - P_r‖_F and ‖P - P_r‖_2 for r = 1..min(n, m), each P_r formed by minilin.lowrank.best_rank_approx."""
    q = min(P.shape[-2:])
    diffs = [P - lowrank.best_rank_approx(P, r) for r in range(1, q + 1)]
    fro = torch.stack([torch.linalg.matrix_norm(d, "fro") for d in diffs], -1)
    spec = torch.stack([torch.linalg.matrix_norm(d, 2) for d in diffs], -1)
    return fro, spec


def _item(call, got, index, expected, what):
    expect(isinstance(got, (tuple, list)) and len(got) == 2, call,
           f"returned {kind(got)}, expected a pair (frobenius, spectral)")
    expect_close(got[index], expected, call=call, what=what, atol=1e-10)


@CHAPTER.task("2.6", "truncation_errors", extend=True)
def truncation_errors(f):
    """the Frobenius and spectral errors of every best rank-r approximation, from the spectrum"""
    cases = ((torch.softmax(rand(2, 3, 8, 8, seed=60) * 2, dim=-1), "attention (2, 3, 8, 8)"),
             (rand(2, 5, 9, seed=61), "(2, 5, 9), fewer rows than columns"),
             (rand(3, 10, 4, seed=62), "(3, 10, 4), more rows than columns"))
    for P, what in cases:
        fro, spec = truncation_loops(P)
        for index, norm, ref in ((0, "Frobenius", fro), (1, "spectral", spec)):
            call = f(P)
            yield check(call, judge=lambda got, call=call, index=index, ref=ref, norm=norm, what=what: _item(
                call, got, index, ref, f"the {norm} norm of P - best_rank_approx(P, r) for r = 1..{ref.shape[-1]}, "
                                       f"P {what}"))
    # an exactly rank-2 product: every error from r = 2 on is zero, and r = 1 leaves the second singular value
    P = rand(2, 7, 2, seed=63) @ rand(2, 2, 6, seed=64)
    s = torch.linalg.svdvals(P)
    exact = torch.zeros(2, 6, dtype=torch.float64)
    exact[:, 0] = s[:, 1]
    for index, norm in ((0, "Frobenius"), (1, "spectral")):
        call = f(P)
        yield check(call, judge=lambda got, call=call, index=index, norm=norm: _item(
            call, got, index, exact, f"the {norm} errors of a rank-2 (7 x 6) matrix: s_2 at r = 1, then zeros"))


# --- 2.7 (extend): the energy rank of a causal banded attention map ------------------------------------------
def band_loops(q, k, width):
    """softmax(q kᵀ / √D) where query i sees key j only when i - width < j <= i, built with plain loops."""
    n = q.shape[2]
    keep = torch.tensor([[i - width < j <= i for j in range(n)] for i in range(n)])
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)


@CHAPTER.task("2.7", "band_rank", extend=True)
def band_rank(f):
    """the rank at an energy threshold of causal attention restricted to a band"""
    for (b, h, n, d), seed in zip(((2, 3, 16, 4), (3, 2, 24, 8)), (70, 71)):
        q, k = rand(b, h, n, d, seed=seed), rand(b, h, n, d, seed=seed + 1)
        for width, threshold in ((2, 0.9), (5, 0.9), (5, 0.5), (n // 2, 0.99)):
            ref = lowrank.rank_at_energy(lowrank.singular_values(band_loops(q, k, width)), threshold)
            call = f(q, k, width, threshold)
            yield check(call, judge=integer_tensor(call, ref, f"the rank at {threshold} energy of the band of width "
                                                              f"{width}, n = {n}, D = {d}, built with loops"))
        call = f(q, k, 1, 0.9)
        yield check(call, judge=integer_tensor(call, torch.full((b, h), math.ceil(0.9 * n)),
                                               f"⌈0.9 n⌉ = {math.ceil(0.9 * n)}: a band of width 1 is the identity"))
        full = lowrank.rank_at_energy(lowrank.singular_values(attention_matrix(q, k, causal=True)), 0.9)
        call = f(q, k, n + 3, 0.9)
        yield check(call, judge=integer_tensor(call, full, f"the rank at 0.9 energy of causal attention: a "
                                                           f"band of width {n + 3} > n hides only the future"))
    yield raises(f(q, k, 0, 0.9), "ValueError", why="(a band must hold at least the diagonal)")
