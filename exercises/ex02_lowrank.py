"""Exercises for notebook 02: is attention low rank?

Implement each function, then grade yourself:  python -m minilin grade --chapter 2
Spectra are 1-D or batched tensors of singular values, largest first: s (..., r). Do not call minilin.lowrank here.

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch


def cumulative_energy(s):
    """Task 2.1: the normalised cumulative energy of a spectrum.

    s: (..., r) singular values, largest first  ->  (..., r), increasing, last entry 1.

    Hint 1 (nudge): "energy" is the squared singular values; entry j is the share of the total held by the first j+1.
    Hint 2 (plan): square; a running sum along the last axis; divide by the total of each spectrum, kept as a
        (..., 1) tensor so that the division broadcasts over the batch dimensions.
    Hint 3 (formula): energy_j = Σ_{i<=j} s_i² / Σ_i s_i²  (`torch.cumsum(..., dim=-1)`, `sum(-1, keepdim=True)`).
    """
    raise NotImplementedError("Task 2.1")


def rank_at_energy(s, threshold=0.9):
    """Task 2.2: the smallest r such that the first r singular values hold `threshold` of the energy.

    s: (..., r)  ->  (...) int64 tensor, each entry in 1..r.

    Hint 1 (nudge): the cumulative energy (Task 2.1) is increasing, so "the first index where it reaches the
        threshold" is the same as "how many entries are still below it".
    Hint 2 (plan): a boolean tensor (..., r) from one comparison, reduced over the last axis; mind that the answer
        counts singular values (starting at 1), not indices (starting at 0).
    Hint 3 (formula): r = #{j : energy_j < threshold} + 1, with one correction for round-off: the last cumulative
        entry can come out a hair below 1 (the running sum and the total add in different orders), and then at
        threshold 1 the count reaches r + 1. Compare each energy_j against the threshold lowered by a tiny
        tolerance (about 1e-12), so that an entry within round-off of the threshold counts as reaching it.
    """
    raise NotImplementedError("Task 2.2")


def effective_rank(s):
    """Task 2.3: the entropy effective rank (Roy & Vetterli 2007).

    s: (..., r), s >= 0  ->  (...) float. It equals r when all r singular values are equal and 1 for a rank-1
    matrix. Zero singular values contribute 0 to the entropy (0·log 0 = 0): do not let them produce NaN.

    Hint 1 (nudge): turn the spectrum into a probability distribution, measure its entropy, and undo the log.
    Hint 2 (plan): normalise along the last axis; compute p·log p only where p > 0, 0 elsewhere; sum over the last
        axis; exponentiate. If you pick the entries with `torch.where`, let it choose what goes *into* the log (a
        stand-in of 1 where p = 0) rather than choose between p·log p and 0 afterwards: both give the right value, but
        the second still takes log 0 in the branch it throws away, and its gradient comes out NaN.
    Hint 3 (formula): p = s / Σ s;  H = -Σ_{p_i > 0} p_i log p_i;  effective rank = exp(H).
    """
    raise NotImplementedError("Task 2.3")


def best_rank_approx(P, r):
    """Task 2.4: the best rank-r approximation of each matrix (Eckart-Young).

    P: (..., n, m)  ->  (..., n, m) of rank <= r.

    Hint 1 (nudge): the singular value decomposition writes P as a sum of rank-1 terms, largest first; keep some.
    Hint 2 (plan): `torch.linalg.svd(P, full_matrices=False)` gives U (..., n, q), S (..., q), Vh (..., q, m);
        slice the first r columns of U, entries of S and rows of Vh; scale U's columns by S with broadcasting
        (no diagonal matrix needed) and multiply back.
    Hint 3 (formula): P_r = U[..., :r] · diag(S[..., :r]) · Vh[..., :r, :].
    """
    raise NotImplementedError("Task 2.4")


def jl_context(P, v, R):
    """Task 2.5: the Johnson-Lindenstrauss stand-in for the context, P Rᵀ R V, without any n x n product.

    P: (..., n, n) attention, v: (..., n, Dv) values, R: (k, n) random projection  ->  (..., n, Dv).

    Hint 1 (nudge): matrix products are associative; the order you choose decides the size of the intermediates.
    Hint 2 (plan): one product of shape (..., n, k), one of shape (..., k, Dv), then one (n x k)(k x Dv) product.
        Never form Rᵀ R: it is n x n, the very matrix the stand-in is meant to avoid.
    Hint 3 (formula): (P Rᵀ) (R V).
    """
    raise NotImplementedError("Task 2.5")
