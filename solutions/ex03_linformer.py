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


def causal_window_linformer(q, k, v, window):
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    n = k.shape[2]
    per_window = []
    for start in range(0, n, window):  # one window of queries at a time
        stop, done = min(start + window, n), start // window  # done: the completed windows before this one
        k_past = k[:, :, :start].unflatten(2, (done, window)).mean(3)  # (B, H, done, D): one slot per window
        v_past = v[:, :, :start].unflatten(2, (done, window)).mean(3)  # (B, H, done, Dv)
        keys = torch.cat([k_past, k[:, :, start:stop]], dim=2)  # slots, then the window's own keys
        values = torch.cat([v_past, v[:, :, start:stop]], dim=2)
        scores = q[:, :, start:stop] @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, w, done + w)
        own = torch.ones(stop - start, stop - start, dtype=torch.bool).tril()  # s <= t inside the window
        allowed = torch.cat([torch.ones(stop - start, done, dtype=torch.bool), own], dim=1)
        per_window.append(scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ values)
    return torch.cat(per_window, dim=2)  # (B, H, n, Dv)


def linformer_matmul_flops(batch, heads, n, m, d, dv, proj_len):
    per_head = 2 * proj_len * m * (d + dv) + 2 * n * proj_len * (d + dv)  # E K, F V; then q (E K)ᵀ, P (F V)
    return batch * heads * per_head
