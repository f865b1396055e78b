"""Solutions for exercises/ex03_linformer.py (standalone: torch and minilin.attention only)."""
import math

import torch

from minilin.attention import softmax_attention


def mean_pool_projection(k, n, dtype=torch.float64):
    if not 1 <= k <= n:
        raise ValueError(f"mean pooling needs 1 <= k <= n, got k={k}, n={n}")
    E = torch.zeros(k, n, dtype=dtype)
    for j, window in enumerate(torch.arange(n).tensor_split(k)):  # the first n % k windows one longer
        E[j, window] = 1.0 / len(window)
    return E


def linformer_forward(q, k, v, E, F, mask=None):
    M = k.shape[2]
    if M > E.shape[-1] or M > F.shape[-1]:
        raise ValueError(f"sequence length {M} exceeds seq_len={min(E.shape[-1], F.shape[-1])} of E/F")
    if mask is not None:
        keep = mask[:, None, :, None]  # (B, 1, M, 1) broadcasts over heads and features
        k, v = k.masked_fill(~keep, 0.0), v.masked_fill(~keep, 0.0)  # a fill: 0 · NaN would be NaN
    return softmax_attention(q, E[..., :M] @ k, F[..., :M] @ v)  # (k, M) or (H, k, M) @ (B, H, M, D)


def slot_probe_r2(x, coeffs, k):
    centred = x - x.mean(dim=0)  # each position's mean over the signals
    directions = torch.linalg.svd(centred, full_matrices=False).Vh[:k]  # (k, n): the top-k principal directions
    design = torch.cat([centred @ directions.T, torch.ones_like(x[:, :1])], dim=1)  # (B, k + 1): slots and a bias
    fitted = design @ (torch.linalg.pinv(design) @ coeffs)  # least squares
    return float(1 - (fitted - coeffs).square().sum() / (coeffs - coeffs.mean(dim=0)).square().sum())


def slots_needed(x, coeffs, share):
    n = x.shape[1]
    return next((k for k in range(1, n + 1) if slot_probe_r2(x, coeffs, k) >= share), n + 1)


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
    if mask is not None:
        keep = mask[:, None, :, None]
        k, v = k.masked_fill(~keep, 0.0), v.masked_fill(~keep, 0.0)
    k_proj, v_proj = E[..., :M] @ k, F[..., :M] @ v
    scores = (q @ k_proj.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~live, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a query with no live slot: all -inf -> zeros
    return weights @ v_proj


def linformer_matmul_flops(batch, heads, n, m, d, dv, proj_len):
    per_head = 2 * proj_len * m * (d + dv) + 2 * n * proj_len * (d + dv)  # E K, F V; then q (E K)ᵀ, P (F V)
    return batch * heads * per_head
