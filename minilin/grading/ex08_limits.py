"""Checks for exercises/ex08_limits.py (Task 8.1, and Task 8.2, optional): both apply the chapter's idea to a
case no notebook cell solves.

Task 8.1 builds a rank-k map of Linformer's form, A F with A's rows non-negative and summing to one, that copies a
permuted span: the grader decodes it as notebook 08's section 4 does, on letters it draws, and compares it with
block averaging (the one map of that section with this form) on the same letters. 8.2 asks how sharp the scores
of a Linformer whose E = F select chosen positions must be to copy them to a tolerance.
"""
import math

import torch

from minilin.grading.checks import Chapter, check, close, expect, expect_within, gen, kind, nonfinite_words, rand
from minilin.linformer import linformer_attention

CHAPTER = Chapter(8, "ex08_limits", "where low rank fails", allowed=("minilin.attention.softmax_attention",))
ALPHABET = 16
MARGIN = 0.1  # the map must keep this much more of the letters than block averaging


def decoded(P, sources, letters):
    """Section 4's argmax decode: the share of slots j whose row of P weighs the letter at sources[j] most
    (letters (draws, S); a tie goes to the lower letter, as torch.argmax does)."""
    mixed = P @ torch.nn.functional.one_hot(letters, ALPHABET).to(P.dtype)  # (draws, S, letters)
    return float((mixed.argmax(-1) == letters[:, sources]).to(P.dtype).mean())


def block_averaging(sources, k):
    """Section 4's block averaging in Linformer's form: slot i of F averages the sources of the i-th of k groups
    of neighbouring answer slots, and each answer slot puts its whole weight on its group's slot."""
    S = sources.shape[0]
    A, F = torch.zeros(S, k, dtype=torch.float64), torch.zeros(k, S, dtype=torch.float64)
    for i, group in enumerate(torch.tensor_split(torch.arange(S), k)):
        A[group, i] = 1.0
        F[i, sources[group]] = 1.0 / len(group)
    return A, F


@CHAPTER.task("8.1", "convex_copy_map", extend=True)
def convex_copy_map(f):
    """a rank-k map of Linformer's form that copies more letters than block averaging"""
    for seed, (S, k) in enumerate(((63, 16), (32, 16), (48, 12), (24, 8))):
        sources = torch.randperm(S, generator=gen(100 + seed))
        letters = torch.randint(ALPHABET, (1000, S), generator=gen(200 + seed))
        call = f(sources, k)
        baseline = decoded(torch.matmul(*block_averaging(sources, k)), sources, letters)

        def judge(got, S=S, k=k, sources=sources, letters=letters, baseline=baseline, call=call):
            expect(isinstance(got, (tuple, list)) and len(got) == 2, call, f"returned {kind(got)}, expected a pair (A, F)")
            A, F = got
            for name, got_m, shape in (("A", A, (S, k)), ("F", F, (k, S))):
                expect(isinstance(got_m, torch.Tensor) and got_m.is_floating_point() and tuple(got_m.shape) == shape,
                       call, f"{name}: returned {kind(got_m)}, expected a floating tensor of shape {shape}")
                expect(bool(torch.isfinite(got_m).all()), call,
                       f"{name} holds {nonfinite_words(got_m[~torch.isfinite(got_m)])}")
            A, F = A.double(), F.double()
            expect(float(A.min()) >= -1e-12, call, f"A's smallest weight is {float(A.min()):.3g}: a softmax's weights "
                   "are >= 0 (a map with weights of both signs is not of Linformer's form)")
            expect_within((A.sum(-1) - 1).abs(), 1e-9, call, "the largest |row sum of A - 1|")
            kept = decoded(A @ F, sources, letters)
            expect(kept >= baseline + MARGIN, call, f"your map A F keeps {kept:.3f} of {letters.numel()} letters; block "
                   f"averaging keeps {baseline:.3f} of the same letters: needed at least {baseline + MARGIN:.3f}")
        yield check(call, judge=judge)


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


def sharpness_by_bisection(v, positions, tol):
    """The smallest s >= 0 at which copy_reference is within tol of v[..., positions, :], by bisection on the
    layer itself (its error falls as s grows), to 1e-10."""
    error = lambda s: float((copy_reference(v, positions, s) - v[:, :, positions]).abs().max())
    if error(0.0) <= tol:
        return 0.0
    low, high = 0.0, 1.0
    while error(high) > tol:
        low, high = high, 2 * high
    while high - low > 1e-10:
        mid = (low + high) / 2
        low, high = (low, mid) if error(mid) <= tol else (mid, high)
    return high


@CHAPTER.task("8.2", "copy_sharpness", extend=True)
def copy_sharpness(f):
    """how sharp a Linformer's scores must be to copy chosen positions to a tolerance"""
    cases = (((2, 3, 9, 4), [5, 1, 7], 1e-3, "3 slots of 9, tol 1e-3"),
             ((3, 2, 6, 2), [4, 3, 2, 0], 1e-6, "4 slots of 6, tol 1e-6"),
             ((1, 2, 40, 3), list(range(0, 40, 2)), 1e-2, "20 slots of 40, tol 1e-2"),
             ((2, 2, 70, 2), list(range(69, 5, -1)), 1e-4, "64 slots of 70 in reverse order, tol 1e-4"),
             ((2, 2, 7, 3), [6, 2], 10.0, "2 slots, tol 10: sharpness 0 already meets it"))
    for seed, (shape, positions, tol, name) in enumerate(cases):
        v = rand(*shape, seed=60 + seed)
        yield close(f(v, positions, tol), sharpness_by_bisection(v, positions, tol), atol=1e-6,
                    what=f"the smallest s by bisection on the copying layer's largest error, {name}")
