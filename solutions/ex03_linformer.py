"""Solutions for exercises/ex03_linformer.py (standalone: torch and minilin.attention only)."""
import math

import torch

from minilin.attention import softmax_attention


def project_sequence(x, E, mask=None):
    M = x.shape[2]
    if mask is not None:
        x = x.masked_fill(~mask[:, None, :, None], 0.0)  # (B, 1, M, 1) broadcasts over heads and features
    return E[..., :M] @ x  # (k, M) or (H, k, M) @ (B, H, M, D) -> (B, H, k, D)


def linformer_forward(q, k, v, E, F, mask=None):
    M = k.shape[2]
    if M > E.shape[-1] or M > F.shape[-1]:
        raise ValueError(f"sequence length {M} exceeds seq_len={min(E.shape[-1], F.shape[-1])} of E/F")
    return softmax_attention(q, project_sequence(k, E, mask), project_sequence(v, F, mask))


def projection_matrix_count(sharing, layers, heads):
    counts = {"none": 2 * layers * heads, "headwise": 2 * layers, "kv": layers, "layerwise": 1}
    if sharing not in counts:
        raise ValueError(f"unknown sharing {sharing!r}; choose one of {tuple(counts)}")
    return counts[sharing]


def fan_in_init(k, n, generator, dtype=torch.float64):
    return torch.randn(k, n, generator=generator, dtype=dtype) / math.sqrt(n)


def linformer_slots(q, k, v, E, F, mask=None):
    M = k.shape[2]
    if M > E.shape[-1] or M > F.shape[-1]:
        raise ValueError(f"sequence length {M} exceeds seq_len={min(E.shape[-1], F.shape[-1])} of E/F")
    real = torch.ones(k.shape[0], M, dtype=k.dtype) if mask is None else mask.to(k.dtype)  # (B, M)
    weight = lambda P: torch.einsum("...jm,bm->b...j", P[..., :M].abs(), real)  # (B, k) or (B, H, k)
    wE, wF = weight(E), weight(F)
    if wE.ndim != wF.ndim:
        wE, wF = (w if w.ndim == 3 else w[:, None, :] for w in (wE, wF))
    live = (wE > 0) | (wF > 0)  # (B, k) or (B, H, k): a slot that holds at least one real position
    live = live[:, None, None, :] if live.ndim == 2 else live[:, :, None, :]  # (B, 1|H, 1, k)
    k_proj, v_proj = project_sequence(k, E, mask), project_sequence(v, F, mask)
    scores = (q @ k_proj.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~live, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a query with no live slot: all -inf -> zeros
    return weights @ v_proj


def linformer_matmul_flops(batch, heads, n, m, d, dv, proj_len):
    per_head = 2 * proj_len * m * (d + dv) + 2 * n * proj_len * (d + dv)  # E K, F V; then q (E K)ᵀ, P (F V)
    return batch * heads * per_head
