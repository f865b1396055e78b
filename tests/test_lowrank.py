"""Low-rank diagnostics: spectra, cumulative energy, ranks, Eckart-Young, and the JL context-error helper."""
import math

import pytest
import torch

from minilin.attention import attention_matrix
from minilin.lowrank import (
    attention_spectrum,
    best_rank_approx,
    cumulative_energy,
    effective_rank,
    energy_at,
    jl_context_error,
    rank_at_energy,
    singular_values,
)
from helpers import rand

TOL = 1e-10  # float64 SVDs of matrices with O(1) entries are accurate to ~1e-14; 1e-10 leaves room
f64 = torch.float64


def rank_r(n, r, seed):
    return rand(n, r, seed=seed) @ rand(r, n, seed=seed + 1)


def test_singular_values_batched_and_sorted():
    P = rand(2, 3, 7, 5, seed=1)
    s = singular_values(P)
    assert s.shape == (2, 3, 5) and s.dtype == f64
    assert (s[..., :-1] >= s[..., 1:]).all()
    for b in range(2):
        for h in range(3):
            torch.testing.assert_close(s[b, h], torch.linalg.svd(P[b, h]).S, rtol=0, atol=TOL)


def test_energy_of_a_rank_r_matrix_reaches_one_at_r():
    s = singular_values(rank_r(12, 3, seed=2))
    e = cumulative_energy(s)
    assert e[1] < 1 - 1e-6 and abs(e[2] - 1) < TOL and abs(e[-1] - 1) < TOL
    assert rank_at_energy(s, 1.0) == 3 and energy_at(s, 3) > 1 - TOL and energy_at(s, 100) == e[-1]


def test_energy_and_rank_on_a_known_spectrum():
    s = torch.tensor([3.0, 2.0, 1.0, 1.0, 1.0], dtype=f64)  # squares 9, 4, 1, 1, 1 (total 16)
    torch.testing.assert_close(cumulative_energy(s), torch.tensor([9, 13, 14, 15, 16], dtype=f64) / 16,
                               rtol=0, atol=TOL)
    torch.testing.assert_close(cumulative_energy(s, power=1), torch.tensor([3, 5, 6, 7, 8], dtype=f64) / 8,
                               rtol=0, atol=TOL)
    assert rank_at_energy(s, 0.5) == 1 and rank_at_energy(s, 0.8) == 2 and rank_at_energy(s, 0.9) == 4
    assert rank_at_energy(s, 0.9, power=1) == 5 and rank_at_energy(s, 0.8, power=1) == 4
    assert energy_at(s, 2) == 13 / 16


def test_effective_rank_extremes():
    eye = singular_values(torch.eye(6, dtype=f64))
    assert abs(effective_rank(eye) - 6) < TOL and abs(effective_rank(eye, "stable") - 6) < TOL
    one = singular_values(rank_r(6, 1, seed=3))
    assert abs(effective_rank(one) - 1) < 1e-6  # trailing singular values are ~1e-16, not exactly 0
    assert abs(effective_rank(one, "stable") - 1) < TOL
    s = torch.tensor([2.0, 1.0, 1.0], dtype=f64)
    assert abs(effective_rank(s) - math.exp(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))) < TOL
    assert abs(effective_rank(s, "stable") - 1.5) < TOL


def test_eckart_young_error_equals_missing_energy():
    P = rand(3, 10, 10, seed=4)
    s = singular_values(P)
    for r in (1, 4, 9):
        rel_err2 = (best_rank_approx(P, r) - P).square().sum((-2, -1)) / P.square().sum((-2, -1))
        torch.testing.assert_close(rel_err2, 1 - energy_at(s, r), rtol=0, atol=TOL)
        assert torch.linalg.matrix_rank(best_rank_approx(P, r)).eq(r).all()


def test_uniform_attention_is_rank_one_and_sharp_attention_is_full_rank():
    n = 16
    q = torch.zeros(1, 1, n, 4, dtype=f64)  # all scores 0: every row is uniform, P = 11ᵀ/n
    s = attention_spectrum(q, rand(1, 1, n, 4, seed=5))
    assert abs(s[0, 0, 0] - 1) < TOL and s[0, 0, 1:].abs().max() < TOL and rank_at_energy(s, 0.999) == 1
    # orthonormal keys e_j (D = n), query i = 30·√n·e_i: scores 30·[i == j], P is e^-30-close to I, full rank
    keys = torch.eye(n, dtype=f64)[None, None]
    s = attention_spectrum(keys * 30 * math.sqrt(n), keys)
    assert rank_at_energy(s, 0.99) == n and abs(effective_rank(s) - n) < 1e-6


def test_attention_spectrum_matches_the_matrix():
    q, k = rand(2, 2, 9, 3, seed=6), rand(2, 2, 9, 3, seed=7)
    mask = torch.tensor([[True] * 9, [True] * 5 + [False] * 4])
    torch.testing.assert_close(attention_spectrum(q, k, mask=mask),
                               singular_values(attention_matrix(q, k, mask=mask)), rtol=0, atol=TOL)
    # padding 4 of 9 keys leaves 4 zero columns: rank <= 5
    assert attention_spectrum(q, k, mask=mask)[1, :, 5:].abs().max() < 1e-12


def test_jl_context_error_rows_and_limits():
    q, k, v = rand(1, 2, 32, 8, seed=8), rand(1, 2, 32, 8, seed=9), rand(1, 2, 32, 8, seed=10)
    rows = jl_context_error(q, k, v, [4, 16, 32, 64], generator=torch.Generator().manual_seed(0), trials=3)
    assert [r["k"] for r in rows] == [4, 16, 32, 64]
    assert set(rows[0]) == {"k", "svd", "jl", "jl_std", "linformer", "linformer_std"}
    svd = [r["svd"] for r in rows]
    assert svd[0] > svd[1] > 0 and svd[2] < TOL and svd[3] < TOL  # rank n reproduces P exactly
    # the SVD is the best rank-k matrix: no random projection of the same rank does better
    assert all(r["svd"] <= r["jl"] and r["svd"] <= r["linformer"] for r in rows)
    again = jl_context_error(q, k, v, [4, 16, 32, 64], generator=torch.Generator().manual_seed(0), trials=3)
    assert again == rows  # deterministic given the generator


def test_jl_error_shrinks_like_one_over_sqrt_k():
    # seed 0, n = 64, 4 trials per k. E‖P(RᵀR - I)V‖² = ‖P‖²‖V‖²-ish / k for R with N(0, 1/k) entries, so the
    # error ratio between k = 16 and k = 1024 should be about sqrt(64) = 8; we accept 4..16 (a factor 2
    # either way, far wider than the ~5% trial-to-trial spread seen at these sizes).
    q, k, v = rand(1, 1, 64, 8, seed=11), rand(1, 1, 64, 8, seed=12), rand(1, 1, 64, 8, seed=13)
    small, large = jl_context_error(q, k, v, [16, 1024], generator=torch.Generator().manual_seed(0), trials=4)
    assert 4 < small["jl"] / large["jl"] < 16


def test_errors():
    s = torch.tensor([1.0, 0.5], dtype=f64)
    with pytest.raises(ValueError, match=r"power must be 1 .* or 2"):
        cumulative_energy(s, power=3)
    with pytest.raises(ValueError, match=r"threshold is a fraction of the energy in \(0, 1\]"):
        rank_at_energy(s, 90)
    with pytest.raises(ValueError, match=r"kind must be 'entropy' or 'stable'"):
        effective_rank(s, "nuclear")
    with pytest.raises(ValueError, match=r"k must be >= 1"):
        energy_at(s, 0)
    with pytest.raises(ValueError, match=r"P must be a \(\.\.\., n, m\) batch of matrices"):
        singular_values(s)
    q = rand(1, 1, 4, 2, seed=14)
    with pytest.raises(ValueError, match=r"every k must be >= 1"):
        jl_context_error(q, q, q, [0, 2], generator=torch.Generator())
