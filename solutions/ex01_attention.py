"""Solutions for notebook 01 (exercises/ex01_attention.py): exact softmax attention from scratch."""
import math

import torch


def scaled_scores(q, k):
    """Task 1.1: q kᵀ / √D, (B, H, N, D) x (B, H, M, D) -> (B, H, N, M)."""
    return torch.einsum("bhnd,bhmd->bhnm", q, k) / math.sqrt(q.shape[-1])


def stable_softmax(scores, dim=-1):
    """Task 1.2: max-subtracted softmax; an all -inf row becomes zeros."""
    top = scores.amax(dim=dim, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(scores - top)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def causal_mask(n, m):
    """Task 1.3: (N, M) bool, True where j <= i + (M - N)."""
    return torch.ones(n, m, dtype=torch.bool).tril(m - n)


def attention(q, k, v, mask=None, causal=False):
    """Task 1.4: exact attention with key padding mask and causal flag."""
    scores = scaled_scores(q, k)  # (B, H, N, M)
    allowed = torch.ones_like(scores, dtype=torch.bool)
    if causal:
        allowed = allowed & causal_mask(q.shape[2], k.shape[2]).to(q.device)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return stable_softmax(scores.masked_fill(~allowed, float("-inf"))) @ v


def score_matrix_bytes(batch, heads, n, dtype):
    """Task 1.5: batch * heads * n * n elements of torch.finfo(dtype).bits / 8 bytes."""
    return batch * heads * n * n * torch.finfo(dtype).bits // 8
