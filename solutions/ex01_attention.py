"""Solutions for notebook 01 (exercises/ex01_attention.py): exact softmax attention from scratch."""
import math

import torch


def scaled_scores(q, k):
    """Task 1.1: grouped-query scores, q (B, H, N, D) x k (B, G, M, D) -> (B, H, N, M); head h uses key head h // (H/G)."""
    group = q.shape[1] // k.shape[1]  # query heads per key head
    keys = k.repeat_interleave(group, dim=1)  # (B, H, M, D): key head g serves query heads g*group .. (g+1)*group-1
    return torch.einsum("bhnd,bhmd->bhnm", q, keys) * q.shape[-1] ** -0.5


def stable_softmax(scores, dim=-1):
    """Task 1.2: exp(s_j) / (1 + sum_j' exp(s_j')), a softmax with an extra zero logit, without overflow."""
    shift = scores.amax(dim=dim, keepdim=True).clamp(min=0.0)  # the largest logit, the extra 0 included
    e = torch.exp(scores - shift)
    return e / (torch.exp(-shift) + e.sum(dim=dim, keepdim=True))


def causal_mask(n, m, prefix=0):
    """Task 1.3: (N, M) bool prefix-LM mask; queries are the last N positions; keys 0..prefix-1 are seen by all."""
    key_pos = torch.arange(m)
    query_pos = torch.arange(m - n, m)
    return (key_pos[None, :] <= query_pos[:, None]) | (key_pos < prefix)[None, :]


def attention(q, k, v, mask=None, causal=False):
    """Task 1.4: grouped-query attention with the softmax of Task 1.2, a key padding mask and a causal flag."""
    scores = scaled_scores(q, k)  # (B, H, N, M)
    group = q.shape[1] // k.shape[1]
    visible = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device)
    if causal:
        visible = causal_mask(q.shape[2], k.shape[2]).to(q.device)
    if mask is not None:
        visible = visible & mask[:, None, None, :]  # (B, 1, N, M)
    weights = stable_softmax(scores.masked_fill(~visible, float("-inf")))
    return weights @ v.repeat_interleave(group, dim=1)  # (B, H, N, Dv)


def saturated_rows(q, k, scale=None, threshold=0.99):
    """Task 1.5: per (batch, head), the share of query rows whose largest softmax weight is >= threshold."""
    c = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    largest = torch.softmax(c * (q @ k.transpose(-2, -1)), dim=-1).amax(dim=-1)  # (B, H, N)
    return (largest >= threshold).to(torch.float64).mean(dim=-1)  # (B, H)


def _softmax_attention(q, k, v, visible):
    """Causal softmax attention over the visible keys (rows with none: zeros); a helper of Tasks 1.6 and 1.7."""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num(0.0) @ v


def decode_step(k_cache, v_cache, q_new, k_new, v_new):
    """Task 1.6: T new tokens against a cache of t earlier ones; returns (out, grown key cache, grown value cache)."""
    keys = torch.cat([k_cache, k_new], dim=2)  # (B, H, t + T, D)
    values = torch.cat([v_cache, v_new], dim=2)  # (B, H, t + T, Dv)
    visible = causal_mask(q_new.shape[2], keys.shape[2]).to(q_new.device)  # bottom-right: the T new queries come last
    return _softmax_attention(q_new, keys, values, visible), keys, values


def local_attention(q, k, v, window, mask=None):
    """Task 1.7: causal attention in which query i (position i + M - N) sees only its `window` most recent keys."""
    if window < 1:
        raise ValueError(f"window must be >= 1 (the number of most recent keys a query sees), got {window}")
    n, m = q.shape[2], k.shape[2]
    lag = (torch.arange(n)[:, None] + (m - n)) - torch.arange(m)[None, :]  # (N, M) query position minus key position
    visible = (causal_mask(n, m) & (lag < window)).to(q.device)[None, None]  # (1, 1, N, M): not future, not too old
    if mask is not None:
        visible = visible & mask[:, None, None, :]  # (B, 1, N, M)
    return _softmax_attention(q, k, v, visible)
