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
