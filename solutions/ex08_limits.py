"""Solutions for exercises/ex08_limits.py (standalone: torch and minilin.attention.softmax_attention only)."""
import math

import torch

from minilin.attention import softmax_attention


def linformer_effective_map(q, k, E, F, mask=None):
    M = k.shape[2]
    E, F = E[..., :M], F[..., :M]  # (k, M) or (H, k, M): shorter sequences use the first columns
    if mask is not None:
        k = k.masked_fill(~mask[:, None, :, None], 0.0)  # padded keys join no slot
        F = F * mask[:, None, None, :]  # (B, 1 or H, k, M): padded values join no slot either
    scores = (q @ (E @ k).transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, N, k)
    return torch.softmax(scores, dim=-1) @ F  # (B, H, N, k) @ (k, M) -> (B, H, N, M)


def rank_cut_errors(P, r):
    s = torch.linalg.svdvals(P)  # (B, H, min(N, M)), largest first
    tail = s[..., r:]
    spectral = tail[..., 0] if tail.shape[-1] else torch.zeros_like(s[..., 0])
    return spectral, tail.square().sum(-1).sqrt()  # Eckart-Young in both norms


def linformer_copy(v, positions, sharpness):
    B, H, M, _ = v.shape
    n_slots = len(positions)
    index = torch.as_tensor(positions)
    select = torch.zeros(n_slots, M, dtype=v.dtype)
    select[torch.arange(n_slots), index] = 1.0  # E = F: row i picks position positions[i]
    keys = torch.zeros(B, H, M, n_slots, dtype=v.dtype)
    keys[:, :, index, torch.arange(n_slots)] = 1.0  # the key at positions[i] is the unit vector e_i
    queries = sharpness * math.sqrt(n_slots) * torch.eye(n_slots, dtype=v.dtype).expand(B, H, n_slots, n_slots)
    return softmax_attention(queries, select @ keys, select @ v)  # scores sharpness · δ_ij over the k slots
