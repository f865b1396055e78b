"""Checks for exercises/ex02_lowrank.py (Tasks 2.1-2.5), against minilin.lowrank."""
import torch

from minilin import lowrank
from minilin.grading.checks import Chapter, captured, check, close, expect, expect_close, kind, rand

CHAPTER = Chapter(2, "ex02_lowrank", "is attention low rank?")
KNOWN = torch.tensor([3.0, 2.0, 1.0, 1.0, 1.0], dtype=torch.float64)  # squares 9 4 1 1 1, total 16


def spectrum(*batch, n=12, seed=0):
    return lowrank.singular_values(torch.softmax(rand(*batch, n, n, seed=seed) * 2, dim=-1))


@CHAPTER.task("2.1", "cumulative_energy")
def cumulative_energy(f):
    """the normalised cumulative energy of a spectrum"""
    s = spectrum(2, 3, seed=1)
    yield close(f(s), lowrank.cumulative_energy(s), what="minilin.lowrank.cumulative_energy(s)")
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
    s = spectrum(4, seed=2)
    for threshold in (0.5, 0.9, 0.99, 1.0):
        call = f(s, threshold)
        yield check(call, judge=integer_tensor(call, lowrank.rank_at_energy(s, threshold),
                                               f"minilin.lowrank.rank_at_energy(s, {threshold})"))
    call = f(KNOWN, 0.8)

    def two(got):
        value = got.reshape(()).item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
        expect(type(value) is int and value == 2, call,
               f"returned {kind(got)}, expected 2 (the first two values hold 13/16 = 0.8125 >= 0.8)")
    yield check(call, judge=two)


@CHAPTER.task("2.3", "effective_rank")
def effective_rank(f):
    """the entropy effective rank exp(H(p))"""
    s = spectrum(3, seed=3)
    yield close(f(s), lowrank.effective_rank(s), what="minilin.lowrank.effective_rank(s)")
    yield close(f(torch.ones(7, dtype=torch.float64)), 7.0, what="7 for seven equal singular values")
    yield close(f(torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64)), 1.0,
                what="1 for a rank-1 spectrum with zeros (0·log 0 = 0, no NaN)")


@CHAPTER.task("2.4", "best_rank_approx")
def best_rank_approx(f):
    """the best rank-r approximation (Eckart-Young)"""
    P = rand(2, 8, 8, seed=4)
    for r in (1, 3, 8):
        call = f(P, r)
        ref = lowrank.best_rank_approx(P, r)

        def judge(got, call=call, ref=ref, r=r):
            expect_close(got, ref, call=call, what=f"minilin.lowrank.best_rank_approx(P, {r})")
            ranks = torch.linalg.matrix_rank(got).tolist()
            expect(all(x == r for x in ranks), call, f"ranks {ranks}, expected {r}")
        yield check(call, judge=judge)


@CHAPTER.task("2.5", "jl_context")
def jl_context(f):
    """P Rᵀ R V without any n x n product"""
    P = torch.softmax(rand(2, 16, 16, seed=5), dim=-1)
    v, R = rand(2, 16, 3, seed=6), rand(5, 16, seed=7) / 5 ** 0.5
    yield close(f(P, v, R), P @ (R.T @ R) @ v, what="P @ (Rᵀ R) @ v")
    # record the (rows, cols) of every matrix product the function forms: none may be n x n
    n = 512
    call = captured(f(torch.softmax(rand(n, n, seed=8), dim=-1), rand(n, 8, seed=9), rand(16, n, seed=10) / 4.0),
                    "matmul_shapes")

    def no_square(got):
        products = got["products"] if isinstance(got, dict) else []
        expect(products, call, "no matrix product was recorded: compute with @ / torch.matmul / einsum")
        expect((n, n) not in products, call, f"an n x n ({n} x {n}) product was formed; products: {products}")
    yield check(call, judge=no_square)
