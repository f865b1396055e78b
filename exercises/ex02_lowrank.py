"""Exercises for notebook 02: is attention low rank?

Implement each function, then grade yourself:  python -m minilin grade --chapter 2
Spectra are 1-D or batched tensors of singular values, largest first: s (..., r); matrices are (..., n, m); queries
and keys are (B, H, n, D). Do not call minilin.lowrank here.

Tasks 2.1-2.5 revisit what notebook 02 builds; Tasks 2.6 and 2.7 are extend tasks: they use the chapter's idea on
a case the notebook does not solve (the errors of every truncation in two norms, a causal banded attention map).

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch


def cumulative_energy(s):
    """Task 2.1: the normalised cumulative energy of a spectrum.

    s: (..., r) singular values, largest first  ->  (..., r), increasing, last entry 1.
    Revisits notebook 02, section 1. Checked on batches (2, 3, 12) and (4, 20), on one spectrum of 7 and on a
    spectrum small enough to do by hand.

    Hint 1 (nudge): "energy" is the squared singular values; entry j is the share of the total held by the first j+1.
    Hint 2 (plan): square; a running sum along the last axis; divide by the total of each spectrum, kept as a
        (..., 1) tensor so that the division broadcasts over the batch dimensions.
    Hint 3 (formula): energy[..., j] = Σ_{i<=j} s[..., i]² / Σ_i s[..., i]², the denominator one number per
        spectrum.
    """
    raise NotImplementedError("Task 2.1")


def rank_at_energy(s, threshold=0.9):
    """Task 2.2: the smallest r such that the first r singular values hold `threshold` of the energy.

    s: (..., r)  ->  (...) integer tensor (int64 is usual; any integer dtype passes), each entry in 1..r.
    Revisits notebook 02, section 1. Checked on batches (4, 12) and (2, 3, 20) at thresholds 0.5, 0.9, 0.99 and 1,
    and on a spectrum small enough to do by hand.

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
    Revisits notebook 02, section 1. Checked on batches (3, 12) and (2, 2, 7), on 4 and 7 equal values, and on a
    spectrum with zeros.

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
    Revisits notebook 02, section 1. Checked on (2, 8, 8), (2, 3, 6, 10) and (9, 4) matrices: the values against
    the truncated SVD, and, as a separate check, that each result has numerical rank r.

    Hint 1 (nudge): the singular value decomposition writes P as a sum of rank-1 terms, largest first; keep some.
    Hint 2 (plan): torch.linalg.svd with full_matrices=False gives U (..., n, q), S (..., q), Vh (..., q, m);
        keep the first r columns of U, entries of S and rows of Vh; scale U's columns by S with broadcasting
        (no diagonal matrix needed) and multiply back.
    Hint 3 (formula): P_r = Σ_{i<=r} S_i u_i v_iᵀ, with u_i the i-th column of U and v_iᵀ the i-th row of Vh.
    """
    raise NotImplementedError("Task 2.4")


def jl_context(P, v, R):
    """Task 2.5: the Johnson-Lindenstrauss stand-in for the context, P Rᵀ R V, without any n x n product.

    P: (..., n, n) attention, v: (..., n, Dv) values, R: (k, n) random projection  ->  (..., n, Dv).
    Revisits notebook 02, section 3. Checked against P (Rᵀ R) V for (n, k, Dv) = (16, 5, 3) and, with batch and
    heads (2, 3), (12, 6, 4); and that no n x n product is formed at n = 512.

    Hint 1 (nudge): matrix products are associative; the order you choose decides the size of the intermediates.
    Hint 2 (plan): one product of shape (..., n, k), one of shape (..., k, Dv), then one (n x k)(k x Dv) product.
        Never form Rᵀ R: it is n x n, the very matrix the stand-in is meant to avoid.
    Hint 3 (formula): (P Rᵀ) (R V).
    """
    raise NotImplementedError("Task 2.5")


def truncation_errors(P):
    """Task 2.6 (extend): the errors of every best rank-r approximation, in two norms, from the spectrum alone.

    P: (..., n, m)  ->  (frobenius, spectral), each (..., q) float64 with q = min(n, m): entry r - 1 is
    ‖P - P_r‖ for the best rank-r approximation P_r (Task 2.4), r = 1..q, in the Frobenius norm and in the spectral
    norm (the largest singular value); the last entries are 0. Compute them without forming any P_r.

    Extends notebook 02, section 1: the notebook checks Eckart-Young as a *relative, squared* Frobenius error at a
    few ranks, by forming P_r. Here you give the absolute errors at every rank at once, and the spectral norm too
    (Eckart-Young-Mirsky holds for both norms). Checked against ‖P - best rank-r approximation‖ for every r, each
    norm on its own, on a (2, 3, 8, 8) batch of attention matrices, on (2, 5, 9) and (3, 10, 4) matrices, and on an
    exactly rank-2 matrix (zeros from r = 2 on).

    Hint 1 (nudge): what is left of P after keeping its r largest rank-1 terms? The norms of that remainder depend
        only on the singular values it still holds.
    Hint 2 (plan): the singular values, largest first; for the Frobenius norm, the sums of squares of every tail
        at once (a running sum taken from the end); for the spectral norm, the first singular value of each tail;
        both shifted by one place, so that entry r - 1 leaves out the first r values, padded with a final 0.
    Hint 3 (formula): with s_1 >= s_2 >= ... >= s_q: frobenius[r - 1] = √(Σ_{i > r} s_i²);
        spectral[r - 1] = s_{r+1}, and 0 for r = q.
    """
    raise NotImplementedError("Task 2.6")


def band_rank(q, k, width, threshold=0.9):
    """Task 2.7 (extend): the rank at an energy threshold of causal attention restricted to a band.

    q, k: (B, H, n, D), width: int >= 1, threshold in (0, 1]  ->  (B, H) integer tensor. The banded attention
    matrix is softmax(q kᵀ / √D) over the keys j with i - width < j <= i only (query i sees itself and the
    width - 1 keys before it); return the rank at `threshold` energy (Task 2.2) of each (b, h) matrix. A width < 1
    raises ValueError.

    Extends notebook 02, section 2(b): the notebook measures sliding windows that are fixed and circulant (they wrap
    around the ends); here the band is causal, does not wrap, and its weights come from the scores. Checked against a
    band built with loops for widths 2, 5 and n/2 (n = 16, D = 4 and n = 24, D = 8, B, H > 1) at thresholds 0.5,
    0.9 and 0.99; width 1 (the identity: ⌈0.9 n⌉ at 0.9); and a width longer than n (causal attention's rank).

    Hint 1 (nudge): this is the causal mask with a second edge, then the spectrum summaries you already wrote.
    Hint 2 (plan): a table (n, n) of "query position minus key position"; keep the entries in 0..width-1 and hide the
        rest with -∞ before a softmax over the keys; singular values per (b, h) in float64; then Task 2.2.
    Hint 3 (formula): P[i, j] = exp(s_ij) / Σ_{i - width < l <= i} exp(s_il) for i - width < j <= i, else 0, with
        s_ij = q_i · k_j / √D; answer = the smallest r with Σ_{l<=r} σ_l² / Σ_l σ_l² >= threshold, σ = the
        singular values of P.
    """
    raise NotImplementedError("Task 2.7")
