"""Checks for exercises/ex01_attention.py (Tasks 1.1-1.5), against minilin.attention."""
import torch

from minilin.attention import allowed_keys, attention_matrix, softmax_attention
from minilin.grading.checks import Chapter, close, equal, rand

CHAPTER = Chapter(1, "ex01_attention", "exact softmax attention")


@CHAPTER.task("1.1", "scaled_scores")
def scaled_scores(f):
    """the raw attention scores q kᵀ / √D"""
    # several head dimensions and lengths: a constant in place of √D cannot pass
    for (n, m, d), seed in zip([(5, 7, 4), (3, 6, 9), (4, 4, 16)], (1, 11, 21)):
        q, k = rand(2, 3, n, d, seed=seed), rand(2, 3, m, d, seed=seed + 1)
        yield close(f(q, k), q @ k.transpose(-2, -1) / d ** 0.5, what=f"q @ k.transpose(-2, -1) / √{d}")


@CHAPTER.task("1.2", "stable_softmax")
def stable_softmax(f):
    """a softmax that cannot overflow and maps an all -inf row to zeros"""
    x = rand(3, 6, seed=3) * 1000.0  # exp(1000) overflows: only a stable version survives
    yield close(f(x), torch.softmax(x, dim=-1), what="torch.softmax(x, dim=-1), x up to ±2224")
    yield close(f(x, dim=0), torch.softmax(x, dim=0), what="torch.softmax(x, dim=0)")
    x = x.clone()  # the calls above keep their own x
    x[1] = float("-inf")
    expected = torch.softmax(x, dim=-1).nan_to_num(0.0)
    yield close(f(x), expected, what="torch.softmax with the all -inf row 1 mapped to zeros (not NaN)")


@CHAPTER.task("1.3", "causal_mask")
def causal_mask(f):
    """the (N, M) bool causal mask, aligned bottom-right"""
    for n, m in [(4, 4), (3, 6), (1, 5)]:
        yield equal(f(n, m), allowed_keys(n, m, causal=True)[0, 0], what="j <= i + (M - N), a bool tensor")


@CHAPTER.task("1.4", "attention")
def attention(f):
    """exact attention with a key padding mask and a causal flag"""
    q, k, v = rand(2, 2, 5, 4, seed=4), rand(2, 2, 5, 4, seed=5), rand(2, 2, 5, 3, seed=6)
    mask = torch.tensor([[True, True, False, True, True], [False, False, True, True, True]])
    for causal in (False, True):
        yield close(f(q, k, v, mask=mask, causal=causal), softmax_attention(q, k, v, mask=mask, causal=causal),
                    what=f"minilin.attention.softmax_attention(q, k, v, mask=mask, causal={causal})")
    yield close(f(q, k, v), attention_matrix(q, k) @ v, what="softmax(q kᵀ / √D) @ v")
    # fewer or more queries than keys (the causal mask aligns bottom-right), another head dimension
    for n, m, seed in ((3, 6, 7), (5, 3, 8)):
        q2, k2, v2 = rand(2, 3, n, 9, seed=seed), rand(2, 3, m, 9, seed=seed + 10), rand(2, 3, m, 2, seed=seed + 20)
        mask2 = torch.ones(2, m, dtype=torch.bool)
        mask2[1, 0] = False
        yield close(f(q2, k2, v2, mask=mask2, causal=True), softmax_attention(q2, k2, v2, mask=mask2, causal=True),
                    what=f"softmax_attention(q, k, v, mask=mask, causal=True) with N={n} queries, M={m} keys, D=9")


@CHAPTER.task("1.5", "score_matrix_bytes")
def score_matrix_bytes(f):
    """bytes of the (batch, heads, n, n) score matrix"""
    yield equal(f(1, 1, 512, torch.float32), 512 * 512 * 4, what="512 x 512 entries of 4 bytes")
    yield equal(f(8, 8, 2048, torch.float16), 8 * 8 * 2048**2 * 2, what="8·8·2048² entries of 2 bytes")
    yield equal(f(2, 3, 10, torch.float64), 2 * 3 * 100 * 8, what="2·3·10² entries of 8 bytes")
    yield equal(f(1, 1, 4, torch.bfloat16), 32, what="16 entries of 2 bytes, as a Python int")
    yield equal(f(4, 16, 32768, torch.float16), 128 * 2**30, what="128 GiB")
