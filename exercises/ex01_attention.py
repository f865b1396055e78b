"""Exercises for notebook 01: exact softmax attention from scratch.

Implement each function, then grade yourself:  python -m minilin grade --chapter 1
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv);
mask (B, M) bool with True = real token (a key padding mask). Do not call minilin.attention here.
"""
import torch


def scaled_scores(q, k):
    """Task 1.1: the raw attention scores q kᵀ / √D.

    q: (B, H, N, D), k: (B, H, M, D)  ->  (B, H, N, M)
    Hint: `k.transpose(-2, -1)` and the `@` operator, or `torch.einsum("bhnd,bhmd->bhnm", q, k)`.
    """
    raise NotImplementedError("Task 1.1")


def stable_softmax(scores, dim=-1):
    """Task 1.2: softmax along `dim` that cannot overflow, and maps an all -inf row to all zeros.

    scores: any shape, may contain -inf (masked entries)  ->  same shape, each row sums to 1 (or is 0)
    Subtract the row maximum before exp (it cancels in the ratio). A row that is entirely -inf has no
    finite maximum: use 0 there, so exp gives zeros, and divide by 1 instead of 0.
    """
    raise NotImplementedError("Task 1.2")


def causal_mask(n, m):
    """Task 1.3: (N, M) bool, True where query i may see key j, i.e. j <= i + (M - N).

    Queries are aligned with the last N keys ("bottom-right"); with N == M this is the lower triangle.
    Hint: `torch.arange` and broadcasting, or `torch.ones(n, m, dtype=torch.bool).tril(m - n)`.
    """
    raise NotImplementedError("Task 1.3")


def attention(q, k, v, mask=None, causal=False):
    """Task 1.4: exact attention softmax(q kᵀ / √D) v with a key padding mask and a causal flag.

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), mask: (B, M) bool or None  ->  (B, H, N, Dv)
    Masked (and, when causal, future) keys get score -inf; use your stable_softmax so a query with no
    visible key outputs zeros.
    """
    raise NotImplementedError("Task 1.4")


def score_matrix_bytes(batch, heads, n, dtype):
    """Task 1.5: bytes needed to store the (batch, heads, n, n) score matrix in `dtype`.

    dtype: a torch dtype, e.g. torch.float16. Hint: `torch.finfo(dtype).bits` or
    `torch.empty((), dtype=dtype).element_size()`. Return a Python int.
    """
    raise NotImplementedError("Task 1.5")
