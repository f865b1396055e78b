"""Exercises for notebook 08: where low rank fails.

Implement each function, then grade yourself:  python -m minilin grade --chapter 8
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); attention maps P (B, H, N, M).
Linformer's projections E, F are (k, seq_len) shared by the heads or (H, k, seq_len) one per head, seq_len >= M.
Only minilin.attention.softmax_attention may be called here (not minilin.lowrank, nor minilin.linformer).

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch

from minilin.attention import softmax_attention  # allowed here (Task 8.3 may use it)


def linformer_effective_map(q, k, E, F, mask=None):
    """Task 8.1: Linformer's attention over the input positions: the (B, H, N, M) map A F.

    q: (B, H, N, D), k: (B, H, M, D), E, F: (k, seq_len) or (H, k, seq_len) with seq_len >= M, mask: (B, M) bool
    (True = real token) or None  ->  (B, H, N, M)
    Linformer's output softmax(q (E k)ᵀ / √D) (F v) equals (A F) v with A = softmax(q (E k)ᵀ / √D), so A F is
    the map each query applies to the M values; its rank is at most k. Use only the first M columns of E and F.
    With a mask, Linformer zeroes padded keys and values before projecting them (notebook 03, section 2): a padded
    key joins no slot, and the map's column of a padded position is 0 (its value joins no slot).
    Revisits notebook 08, section 3 (the map of a trained Linformer), for per-head projections, sequences shorter
    than seq_len and padding as well.

    Hint 1 (nudge): the softmax is taken over the k projected slots, not over the M positions; the projection F
        then spreads each slot's weight back over the positions.
    Hint 2 (plan): cut E and F to M columns; zero the padded keys; project the keys; scores over the slots, scaled
        by 1/√D; softmax over the last axis gives (B, H, N, k); a last product with F, whose columns at padded
        positions are zeroed (per batch row), gives (B, H, N, M).
    Hint 3 (formula): map[i, j] = m_j · Σ_s A[i, s] F[s, j] with A[i, s] = softmax over s of
        q_i · (Σ_t E[s, t] m_t k_t) / √D, where m_t is 1 for a real position and 0 for a padded one (all 1 without
        a mask), and t and j run over the first M positions.
    """
    raise NotImplementedError("Task 8.1")


def rank_cut_errors(P, r):
    """Task 8.2: how far the best rank-r matrix is from each map, in the spectral and the Frobenius norm.

    P: (B, H, N, M) float64 maps, r: an int >= 0  ->  (spectral, frobenius), two (B, H) tensors: the norms of
    P - P_r, where P_r is the best rank-r approximation of each (N, M) matrix (truncated SVD).
    Extends notebook 08, section 4 (which cuts trained maps to rank r with minilin.lowrank.best_rank_approx and
    only reads the accuracy) and notebook 02, section 1 (the relative Frobenius error): here both errors come from
    the singular values alone, for any map and any r, including r = 0 and r at or above the rank.

    Hint 1 (nudge): Eckart–Young says what the best rank-r cut leaves behind: the singular values it drops. Which
        norm of a matrix is its largest singular value, and which is the root of the sum of their squares?
    Hint 2 (plan): the singular values of every matrix in the batch at once, largest first; keep those from index
        r on; reduce them two ways. When r reaches the number of singular values nothing is left: both errors 0.
    Hint 3 (formula): with s_1 >= s_2 >= ... the singular values of P, spectral error = s_{r+1} (0 when there is no
        (r+1)-th value) and Frobenius error = √(Σ_{i>r} s_i²).
    """
    raise NotImplementedError("Task 8.2")


def linformer_copy(v, positions, sharpness):
    """Task 8.3: make Linformer copy the values at k chosen positions, with a selection E = F.

    v: (B, H, M, Dv), positions: a list of k distinct ints in 0..M-1, sharpness: a float s >= 0  ->  (B, H, k, Dv)
    Build the (k, M) selection matrix with E = F (row i is 1 at column positions[i], 0 elsewhere), keys k (B, H, M, k)
    whose row at positions[i] is the unit vector e_i (zero rows elsewhere), and k queries q_j = s·√k·e_j; return
    Linformer's output softmax(q (E k)ᵀ / √k) (F v) for them. Slot j then reads v[positions[j]], exactly as s grows.
    Extends notebook 08, sections 1 and 4: the copy that needs rank S is within reach of a Linformer whose k slots
    are the positions to copy; no notebook cell builds such a projection.

    Hint 1 (nudge): with E a selection, E k and F v are just rows of k and v picked out in the order of
        `positions`. What scores do one-hot keys and scaled one-hot queries give?
    Hint 2 (plan): build the selection matrix and the one-hot keys (mind the order: key row positions[i] holds
        e_i), scale an identity for the queries, then exact attention over the k projected slots (you may call
        softmax_attention for that last step).
    Hint 3 (formula): the scores are s·δ_ij, so slot j returns (e^s · v[positions[j]] + Σ_{i≠j} v[positions[i]]) /
        (e^s + k - 1): the copy of v[positions[j]] up to weight (k - 1) / (e^s + k - 1) on the other slots.
    """
    raise NotImplementedError("Task 8.3")
