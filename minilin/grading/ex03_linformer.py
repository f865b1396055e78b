"""Checks for exercises/ex03_linformer.py (Tasks 3.1-3.4), against minilin.linformer."""
import math

import torch

from minilin import linformer
from minilin.attention import softmax_attention
from minilin.grading.calls import Gen
from minilin.grading.checks import Chapter, check, close, equal, expect, expect_close, rand, raises

CHAPTER = Chapter(3, "ex03_linformer", "the Linformer layer", allowed=("minilin.attention.softmax_attention",))
MASK = torch.tensor([[True, True, True, True, False, False], [True, False, True, True, True, True]])


@CHAPTER.task("3.1", "project_sequence")
def project_sequence(f):
    """project keys or values along the sequence axis, padding excluded"""
    x = rand(2, 3, 6, 4, seed=1)
    for per_head in (False, True):
        E = rand(3, 5, 8, seed=2) if per_head else rand(5, 8, seed=2)  # seq_len 8 > M = 6: the first 6 columns
        name = "E (H, k, seq_len)" if per_head else "E (k, seq_len)"
        yield close(f(x, E), E[..., :6] @ x, what=f"E[..., :M] @ x with {name}")
        x_nan = x.clone()
        x_nan[~MASK[:, None, :, None].expand_as(x)] = float("nan")  # padding may hold anything
        yield close(f(x_nan, E, MASK), E[..., :6] @ x.masked_fill(~MASK[:, None, :, None], 0.0),
                    what=f"E[..., :M] @ x with padded positions zeroed ({name}; NaN in the padding)")


@CHAPTER.task("3.2", "linformer_forward")
def linformer_forward(f):
    """Linformer attention softmax(q (E k)ᵀ / √D) (F v)"""
    q, k, v = rand(2, 3, 5, 4, seed=3), rand(2, 3, 6, 4, seed=4), rand(2, 3, 6, 2, seed=5)
    E, F = rand(3, 4, 8, seed=6), rand(4, 8, seed=7)
    for mask, name in ((None, "None"), (MASK, "mask")):
        yield close(f(q, k, v, E, F, mask=mask), linformer.linformer_attention(q, k, v, E, F, mask=mask),
                    what=f"minilin.linformer.linformer_attention(q, k, v, E, F, mask={name})")
    eye = torch.eye(6, dtype=torch.float64)  # k = n and E = F = I: exact attention
    yield close(f(q, k, v, eye, eye), softmax_attention(q, k, v), what="exact attention (E = F = identity)")
    q1 = rand(1, 1, 6, 2, seed=8)
    yield raises(f(q1, q1, q1, rand(2, 5, seed=9), rand(2, 5, seed=10)), "ValueError",
                 why="(6 keys but E, F have only 5 columns: Linformer has a fixed maximum length)")


@CHAPTER.task("3.3", "projection_matrix_count")
def projection_matrix_count(f):
    """how many projection matrices each sharing mode stores"""
    for sharing in linformer.SHARING:
        for layers, heads in ((12, 12), (3, 5), (1, 1)):
            yield equal(f(sharing, layers, heads),
                        linformer.projection_matrix_count(sharing, layers=layers, heads=heads),
                        what=f"the count for sharing={sharing!r} (paper sec. 4)")
    yield raises(f("everything", 2, 2), "ValueError", why="for an unknown sharing mode")


@CHAPTER.task("3.4", "fan_in_init")
def fan_in_init(f):
    """a projection whose projected keys keep the scale of the keys"""
    # seed 0; k = 64, n = 1024: 65536 entries, so the sample variance has relative standard error
    # sqrt(2 / 65536) = 0.55%; a 5% band is 9 standard errors wide, yet rejects N(0, 1/k) (16x) and
    # Xavier (1.9x). The projected-key check uses 64 x 32 products of 1024 terms (5% band, same reasoning).
    call, again = f(64, 1024, Gen(0)), f(64, 1024, Gen(0))
    keys = rand(1024, 32, seed=11)

    def judge(E, E2):
        expect(isinstance(E, torch.Tensor) and E.shape == (64, 1024) and E.dtype == torch.float64, call,
               f"expected a (64, 1024) float64 tensor, got {E.shape if isinstance(E, torch.Tensor) else E!r}")
        mean_bound = 5 / math.sqrt(65536) / math.sqrt(1024)
        expect(abs(E.mean().item()) < mean_bound, call, f"mean {E.mean().item():.3g}, expected |mean| < "
               f"{mean_bound:.3g} (5 standard errors of N(0, 1/n))")
        expect(abs(E.var().item() * 1024 - 1) < 0.05, call,
               f"variance · n = {E.var().item() * 1024:.4f}, expected 1 ± 0.05 (entries N(0, 1/n))")
        ratio = (E @ keys).var().item() / keys.var().item()
        expect(abs(ratio - 1) < 0.1, call, f"Var[E K] / Var[K] = {ratio:.3f}, expected 1 ± 0.1")
        expect_close(E2, E, call=again, what="the first draw with the same seed (use the generator)", atol=0.0)
    yield check(call, again, judge=judge)
