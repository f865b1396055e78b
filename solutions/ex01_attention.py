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


def decode_step(k_cache, v_cache, q_new, k_new, v_new):
    """Task 1.6: T new tokens against a cache of t earlier ones; returns (out, grown key cache, grown value cache)."""
    keys = torch.cat([k_cache, k_new], dim=2)  # (B, H, t + T, D)
    values = torch.cat([v_cache, v_new], dim=2)  # (B, H, t + T, Dv)
    visible = causal_mask(q_new.shape[2], keys.shape[2]).to(q_new.device)  # bottom-right: the T new queries come last
    out = stable_softmax(scaled_scores(q_new, keys).masked_fill(~visible, float("-inf"))) @ values  # (B, H, T, Dv)
    return out, keys, values


def local_attention(q, k, v, window, mask=None):
    """Task 1.7: causal attention in which query i (position i + M - N) sees only its `window` most recent keys."""
    if window < 1:
        raise ValueError(f"window must be >= 1 (the number of most recent keys a query sees), got {window}")
    n, m = q.shape[2], k.shape[2]
    lag = (torch.arange(n)[:, None] + (m - n)) - torch.arange(m)[None, :]  # (N, M) query position minus key position
    visible = (causal_mask(n, m) & (lag < window)).to(q.device)[None, None]  # (1, 1, N, M): not future, not too old
    if mask is not None:
        visible = visible & mask[:, None, None, :]  # (B, 1, N, M)
    return stable_softmax(scaled_scores(q, k).masked_fill(~visible, float("-inf"))) @ v
