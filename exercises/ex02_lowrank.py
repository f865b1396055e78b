"""Exercises for notebook 02: is attention low rank?

Implement each function, then grade yourself:  python -m minilin grade --chapter 2
Spectra are 1-D or batched tensors of singular values, largest first: s (..., r). Do not call minilin.lowrank here.
"""
import torch


def cumulative_energy(s):
    """Task 2.1: normalised cumulative energy of a spectrum, energy_j = Σ_{i<=j} s_i² / Σ_i s_i².

    s: (..., r) singular values, largest first  ->  (..., r), increasing, last entry 1.
    Hint: `torch.cumsum(..., dim=-1)` and a sum with `keepdim=True` so the division broadcasts.
    """
    raise NotImplementedError("Task 2.1")


def rank_at_energy(s, threshold=0.9):
    """Task 2.2: the smallest r such that the first r singular values hold `threshold` of the energy.

    s: (..., r)  ->  (...) int64 tensor, each entry in 1..r.
    Hint: count how many cumulative-energy entries are still below the threshold, then add one.
    """
    raise NotImplementedError("Task 2.2")


def effective_rank(s):
    """Task 2.3: the entropy effective rank exp(H(p)) with p = s / Σ s (Roy & Vetterli 2007).

    s: (..., r), s >= 0  ->  (...) float. It equals r when all r singular values are equal and 1 for a rank-1
    matrix. Zero singular values contribute 0 to the entropy (0·log 0 = 0): do not let them produce NaN.
    """
    raise NotImplementedError("Task 2.3")


def best_rank_approx(P, r):
    """Task 2.4: the best rank-r approximation of each matrix (Eckart-Young): keep the r largest singular values.

    P: (..., n, m)  ->  (..., n, m) of rank <= r.
    Hint: `U, S, Vh = torch.linalg.svd(P, full_matrices=False)`, then U[..., :r] · diag(S[..., :r]) · Vh[..., :r, :]
    (multiply columns of U by S with broadcasting instead of building a diagonal matrix).
    """
    raise NotImplementedError("Task 2.4")


def jl_context(P, v, R):
    """Task 2.5: the Johnson-Lindenstrauss stand-in for the context, P Rᵀ R V, without any n x n product.

    P: (..., n, n) attention, v: (..., n, Dv) values, R: (k, n) random projection  ->  (..., n, Dv).
    Compute (P Rᵀ) and (R V) first: (n x k) times (k x Dv). Never form Rᵀ R, which is n x n.
    """
    raise NotImplementedError("Task 2.5")
