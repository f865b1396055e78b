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


def state_readout(k, v, q):
    state = k.transpose(-2, -1) @ v  # (B, H, D, Dv): Σ_i k_i v_iᵀ, the same size for any p
    return q @ state


def recall_accuracy(k, v):
    readout = state_readout(k, v, k)  # (B, H, p, Dv): each stored key asks for its own value
    nearest = torch.cdist(readout, v).argmin(dim=-1)  # (B, H, p): the stored value closest to each readout
    own = torch.arange(k.shape[-2], device=k.device)
    return (nearest == own).to(k.dtype).mean(dim=-1)


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


def pairs_held(k, v, threshold=0.9):
    held = 0
    for p in range(1, k.shape[0] + 1):
        state = k[:p].T @ v[:p]  # (D, Dv): the first p pairs in one fixed-size state
        nearest = torch.cdist(k[:p] @ state, v[:p]).argmin(dim=-1)  # (p,): the value each key reads back
        if (nearest == torch.arange(p)).to(k.dtype).mean() < threshold:
            break
        held = p
    return held
