"""Exercises for notebook 02: is attention low rank?

Implement each function, then grade yourself:  python -m minilin grade --chapter 2
Matrices are (..., n, m); queries and keys are (B, H, n, D). Use torch only: do not call minilin.lowrank here.

Each task uses the chapter's idea on a case the notebook does not solve. Task 2.4 asks you to predict the chapter's
main finding (a window's rank against its width) where no measurement by SVD is possible; Tasks 2.5 and 2.6 are extend
tasks (the errors of every truncation in two norms, a causal banded attention map).

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch


def rank_for_error(P, max_error):
    """Task 2.1: the smallest rank whose best approximation is within a relative error of each matrix.

    P: (..., n, m), max_error: a float with 0 <= max_error < 1  ->  (...) integer tensor, each entry in 1..min(n, m):
    the smallest r such that the best rank-r approximation P_r has ||P - P_r||_F <= max_error * ||P||_F. Allow
    round-off: an error within 1e-12 of the bound, in squared relative terms, counts as meeting it (so max_error = 0
    gives the numerical rank of an exactly low-rank matrix). A max_error outside [0, 1) raises ValueError.

    Notebook 02, section 1 goes from a rank to its error; this task goes the other way, from an error budget to the
    rank, without forming any P_r. Checked against the errors of every truncation, computed by the grader one rank at
    a time, on (2, 3, 8, 8) attention matrices, (4, 12, 7) and (9, 5) matrices at max_error 0.5, 0.3, 0.1 and 0.01,
    and on an exactly rank-2 matrix at max_error 0.

    Hint 1 (nudge): Eckart-Young says what the best rank-r error is, in terms of the singular values alone.
    Hint 2 (plan): singular values in float64; the squared error of each rank is a sum over the tail of the squared
        singular values; compare every rank's squared error with the allowed one, all at once, and count.
    Hint 3 (formula): the squared error of rank r is the energy of the singular values after the r-th; the answer is
        the first rank whose leftover energy fits within the squared error budget (plus the round-off allowance)
        times the total energy.
    """
    raise NotImplementedError("Task 2.1")


def one_hot_spectrum(picks, n_keys):
    """Task 2.2: the singular values of one-hot attention, from the picks alone.

    picks: (..., n_q) integer tensor, each entry in 0..n_keys-1: query i puts all its weight on key picks[..., i].
    Returns (..., min(n_q, n_keys)) float64, the singular values of the (n_q, n_keys) one-hot attention matrix of each
    batch entry, largest first (the same as torch.linalg.svdvals of that matrix). Do not build the matrix or call an
    SVD: the answer follows from how often each key is picked.

    Notebook 02, section 2 builds one-hot matrices with as many queries as keys and counts their rank; here the
    numbers of queries and keys differ and you give the whole spectrum. Checked against svdvals of the one-hot
    matrices for picks of shapes (3, 40) over 25 keys, (2, 2, 10) over 30 keys and (5, 64) over 64 keys, and on
    picks [0, 0, 0, 1] over 3 keys (singular values √3, 1, 0).

    Hint 1 (nudge): two rows that pick the same key are equal, two rows that pick different keys are orthogonal.
        What is Pᵀ P?
    Hint 2 (plan): count, per batch entry, how many queries pick each key (a tensor (..., n_keys)); turn counts into
        singular values; sort them, largest first; keep as many as the smaller side of the matrix.
    Hint 3 (formula): Pᵀ P is diagonal, and each diagonal entry counts something about its key; P's singular values
        are the square roots of the eigenvalues of Pᵀ P, and a diagonal matrix's eigenvalues are its diagonal entries.
        Mind how many values to return when keys outnumber queries.
    """
    raise NotImplementedError("Task 2.2")


def jl_projected_length(P, value_mean, max_error):
    """Task 2.3: the projected length k the JL stand-in needs when the values share a mean.

    P: (..., n, n) attention, value_mean: (..., Dv) float, max_error: float > 0  ->  (...) integer tensor. The values
    are V = 1 μᵀ + Z: every row is the mean μ = value_mean plus independent N(0, 1) noise Z. Return, for each (P, μ),
    the smallest integer k at which the JL stand-in (P Rᵀ)(R V), R of shape (k, n) with entries N(0, 1/k), has
    E||(P Rᵀ)(R V) - P V||_F^2 <= max_error^2 E||P V||_F^2, both expectations over R and the noise. You get μ, not V.

    Notebook 02, section 4 derives the expected error for a given V, and measures one V with a shared mean; here you
    predict k from P and μ alone, before any V is drawn. Checked against the expectations on (2, 3, 16, 16) soft and
    (24, 24) sharp attention matrices with zero, equal and unequal means, at max_error 0.5 and 0.2; on a permutation
    P; and by drawing V and R at your k for a (96, 96) attention matrix with every mean 1: over 40 draws the squared
    error must be within 25% of max_error^2 times the squared context.

    Hint 1 (nudge): section 4's formula holds for any fixed V; average its numerator and its denominator over the
        noise. Where does the mean go when P multiplies V? (Every row of attention sums to 1, but use P's own row
        sums and the formula holds for any P.)
    Hint 2 (plan): expected ||V||_F^2 from the mean and the noise; expected ||P V||_F^2 as the mean's part (through
        P times the ones vector) plus the noise's part (through ||P||_F^2), the cross term averaging to zero; form
        the expected ρ and solve the error formula for k; round up.
    Hint 3 (formula): the expected ρ is ||P||_F^2 times the expected ||V||_F^2, divided by the expected ||P V||_F^2;
        the expected squared error is ρ + 1 over k, in units of the expected squared context. Check: with μ = 0 the
        answer is about n over max_error squared, and for a permutation P the mean does not matter.
    """
    raise NotImplementedError("Task 2.3")


def predicted_window_rank(n, width):
    """Task 2.4 (predict the finding): the rank at 90% energy of a circulant box window, for n up to a million.

    n: int (positions), width: odd int, 3 <= width <= n / 16  ->  a Python int: your prediction of the rank at 90%
    energy of the (n, n) circulant box window of notebook 02, section 3 (query i averages the `width` positions
    i - width//2 .. i + width//2, wrapping around the ends). The grader calls it with n up to 2^20, where an n x n
    matrix would need 8 TB: predict, or compute from something smaller than the matrix.

    Notebook 02, section 3 measures windows at n = 256 and 512 by SVD. The grader measures each of its cases itself
    and accepts a prediction within 2% of its measurement, at seven (n, width) pairs from (4096, 3) to (2^20, 1025).
    The constant c in rank ≈ c n / width changes with the width by more than 2%: one constant, or a table read from
    the notebook, will not do.

    Hint 1 (nudge): section 3's rule rank ≈ c n / width is a summary; what does c depend on, and what would let you
        count exactly without the n x n matrix?
    Hint 2 (plan): the matrix is circulant; its n singular values can be had from one row (Appendix C of the notebook
        says how), in memory of size n; then count them as in section 1.
    Hint 3 (formula): the singular values of a circulant matrix are the magnitudes of the discrete Fourier transform
        of its first row; sort them, largest first, and take the smallest number of them whose squares hold 90% of
        the sum of all squares.
    """
    raise NotImplementedError("Task 2.4")


def truncation_errors(P):
    """Task 2.5 (extend): the errors of every best rank-r approximation, in two norms, from the spectrum alone.

    P: (..., n, m)  ->  (frobenius, spectral), each (..., q) float64 with q = min(n, m): entry r - 1 is
    ‖P - P_r‖ for the best rank-r approximation P_r (section 1), r = 1..q, in the Frobenius norm and in the spectral
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
    Hint 3 (formula): the Frobenius error of rank r is the square root of the energy in the singular values after
        the r-th; the spectral error is the largest singular value left out, the (r + 1)-th, and nothing at full rank.
    """
    raise NotImplementedError("Task 2.5")


def band_rank(q, k, width, threshold=0.9):
    """Task 2.6 (extend): the rank at an energy threshold of causal attention restricted to a band.

    q, k: (B, H, n, D), width: int >= 1, threshold in (0, 1]  ->  (B, H) integer tensor. The banded attention
    matrix is softmax(q kᵀ / √D) over the keys j with i - width < j <= i only (query i sees itself and the
    width - 1 keys before it); return the rank at `threshold` energy (section 1) of each (b, h) matrix. A width < 1
    raises ValueError.

    Extends notebook 02, section 3: the notebook measures sliding windows that are fixed and circulant (they wrap
    around the ends); here the band is causal, does not wrap, and its weights come from the scores. Checked against a
    band built with loops for widths 2, 5 and n/2 (n = 16, D = 4 and n = 24, D = 8, B, H > 1) at thresholds 0.5,
    0.9 and 0.99; width 1 (the identity: ⌈0.9 n⌉ at 0.9); and a width longer than n (causal attention's rank).

    Hint 1 (nudge): this is the causal mask with a second edge, then the spectrum summary of section 1.
    Hint 2 (plan): a table (n, n) of "query position minus key position"; keep the entries in 0..width-1 and hide the
        rest with -∞ before a softmax over the keys; singular values per (b, h) in float64; then count as in
        section 1.
    Hint 3 (formula): each row is the softmax of the scaled scores over the keys from width - 1 before the query up
        to the query itself, zero elsewhere; the answer is the smallest r whose r largest squared singular values
        hold at least `threshold` of the total.
    """
    raise NotImplementedError("Task 2.6")
