"""Checks for exercises/ex08_limits.py (Tasks 8.1-8.3), against minilin.attention, lowrank and linformer.

Task 8.1 rebuilds notebook 08's effective Linformer map A F; 8.2 (the spectral and Frobenius errors of the best
rank-r cut, from the singular values) and 8.3 (a selection E = F with which Linformer copies k chosen positions)
are extend tasks: the chapter's idea on a case no notebook cell solves.
"""
import math

import torch

from minilin.attention import attention_matrix
from minilin.grading.checks import Chapter, check, close, expect, expect_close, kind, rand
from minilin.linformer import linformer_attention
from minilin.lowrank import best_rank_approx

CHAPTER = Chapter(8, "ex08_limits", "where low rank fails", allowed=("minilin.attention.softmax_attention",))


@CHAPTER.task("8.1", "linformer_effective_map")
def linformer_effective_map(f):
    """Linformer's attention over the input positions, A F, rank at most k"""
    cases = (((2, 3, 7, 7, 4), 3, (3, 7), "E, F (k, n) shared by the heads, N = M = n, D = 4"),
             ((2, 3, 7, 7, 4), 3, (3, 3, 7), "E, F (H, k, n) one per head, D = 4"),
             ((3, 2, 5, 6, 2), 4, (4, 9), "M = 6 < n = 9 (the first M columns), N != M, D = 2"))
    for seed, ((b, h, n_q, m, d), k_len, e_shape, name) in enumerate(cases):
        q, keys = rand(b, h, n_q, d, seed=10 * seed + 1), rand(b, h, m, d, seed=10 * seed + 2)
        E, F = rand(*e_shape, seed=10 * seed + 3), rand(*e_shape, seed=10 * seed + 4)
        expected = attention_matrix(q, E[..., :m] @ keys) @ F[..., :m]  # (B, H, N, k) @ (k, M) -> (B, H, N, M)
        yield close(f(q, keys, E, F), expected,
                    what=f"attention_matrix(q, E[..., :M] @ k) @ F[..., :M], {name}")
    # padding: a padded key is out of every slot, and a padded value out of every slot's mix
    q, keys, E, F = rand(2, 3, 5, 4, seed=30), rand(2, 3, 6, 4, seed=31), rand(3, 8, seed=32), rand(3, 3, 8, seed=33)
    mask = torch.tensor([[True, True, True, True, False, False], [True, False, True, True, True, True]])
    pad = ~mask[:, None, :, None]  # (B, 1, M, 1)
    expected = attention_matrix(q, E[..., :6] @ keys.masked_fill(pad, 0.0)) @ (F[..., :6] * mask[:, None, None, :])
    yield close(f(q, keys, E, F, mask=mask), expected,
                what="the map with padded keys zeroed before E and padded columns of F zeroed, mask (2, 6), "
                     "E (k, n), F (H, k, n)")
    # the map reproduces the layer, padding included: (A F) v is minilin.linformer.linformer_attention's output
    q, keys, v = rand(2, 2, 6, 3, seed=40), rand(2, 2, 8, 3, seed=41), rand(2, 2, 8, 5, seed=42)
    E, F = rand(2, 2, 8, seed=43), rand(2, 2, 8, seed=44)
    mask = torch.tensor([[True] * 8, [True] * 5 + [False] * 3])
    call = f(q, keys, E, F, mask=mask)
    out = linformer_attention(q, keys, v, E, F, mask=mask)

    def reproduces(P):
        expect(isinstance(P, torch.Tensor) and P.shape == (2, 2, 6, 8), call,
               f"returned {kind(P)}, expected a (2, 2, 6, 8) tensor")
        expect_close(P @ v, out, call=call, what="linformer_attention(q, k, v, E, F, mask=mask) (your map times v)")
        ranks = torch.linalg.matrix_rank(P.flatten(0, 1))
        expect(int(ranks.max()) <= 2, call, f"a map of rank {int(ranks.max())}, expected at most k = 2")
    yield check(call, judge=reproduces)


def cut_errors_loop(P, r):
    """(spectral, Frobenius) norms of P - its best rank-r approximation, one matrix at a time: (B, H) each."""
    spectral, frobenius = torch.zeros(P.shape[:2], dtype=P.dtype), torch.zeros(P.shape[:2], dtype=P.dtype)
    for b in range(P.shape[0]):
        for h in range(P.shape[1]):
            rest = P[b, h] - best_rank_approx(P[b, h], r)
            spectral[b, h] = torch.linalg.matrix_norm(rest, ord=2)
            frobenius[b, h] = torch.linalg.matrix_norm(rest, ord="fro")
    return spectral, frobenius


@CHAPTER.task("8.2", "rank_cut_errors", extend=True)
def rank_cut_errors(f):
    """the errors of the best rank-r cut of attention maps, from their singular values"""
    square = torch.softmax(rand(2, 3, 8, 8, seed=50, scale=2.0), dim=-1)
    wide = torch.softmax(rand(3, 2, 5, 9, seed=51, scale=3.0), dim=-1)
    copy = torch.zeros(2, 2, 6, 11, dtype=torch.float64)  # slot j reads position j: six singular values 1
    copy[..., torch.arange(6), torch.arange(6)] = 1.0
    cases = ((square, 3, "softmax maps (2, 3, 8, 8), r = 3"), (wide, 2, "softmax maps (3, 2, 5, 9), r = 2"),
             (wide, 0, "r = 0 (the cut keeps nothing)"), (square, 8, "r = 8 = full rank (nothing is cut)"),
             (copy, 4, "the ideal copy map of 6 slots over 11 positions, r = 4"))
    for P, r, name in cases:
        yield close(f(P, r), cut_errors_loop(P, r), atol=1e-9,
                    what=f"(spectral, Frobenius) norms of P - best_rank_approx(P, r), per matrix, {name}")


def copy_reference(v, positions, sharpness):
    """Linformer with E = F selecting `positions`, one-hot keys there, and queries sharpness·√k·e_j."""
    B, H, M, _ = v.shape
    k = len(positions)
    E = torch.zeros(k, M, dtype=v.dtype)
    E[torch.arange(k), torch.tensor(positions)] = 1.0
    keys = torch.zeros(B, H, M, k, dtype=v.dtype)
    keys[:, :, torch.tensor(positions), torch.arange(k)] = 1.0  # key at positions[i] is e_i
    q = (sharpness * math.sqrt(k) * torch.eye(k, dtype=v.dtype)).expand(B, H, k, k)
    return linformer_attention(q, keys, v, E, E)


@CHAPTER.task("8.3", "linformer_copy", extend=True)
def linformer_copy(f):
    """Linformer copies k chosen positions with a selection E = F"""
    cases = (((2, 3, 9, 4), [5, 1, 7], 3.0, "positions [5, 1, 7] of 9, sharpness 3"),
             ((3, 2, 6, 2), [4, 3, 2, 0], 10.0, "positions [4, 3, 2, 0] of 6, sharpness 10"),
             ((2, 2, 7, 3), [6, 2], 0.0, "sharpness 0: every slot averages the selected values"))
    for seed, (shape, positions, s, name) in enumerate(cases):
        v = rand(*shape, seed=60 + seed)
        yield close(f(v, positions, s), copy_reference(v, positions, s),
                    what=f"linformer_attention with a selection E = F, {name}")
    v = rand(2, 3, 8, 5, seed=70)
    positions = [7, 0, 3, 5, 1]
    yield close(f(v, positions, 40.0), v[:, :, positions], atol=1e-12,
                what="v at the selected positions (sharpness 40: the copy is exact to round-off)")
