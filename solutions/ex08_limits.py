"""Solutions for exercises/ex08_limits.py (standalone: math and torch only)."""
import math

import torch


def linformer_effective_map(q, k, E, F, mask=None):
    B, M = k.shape[0], k.shape[2]
    E, F = E[..., :M], F[..., :M]  # (k, M) or (H, k, M): shorter sequences use the first columns
    real = torch.ones(B, M, dtype=k.dtype) if mask is None else mask.to(k.dtype)  # (B, M)
    if mask is not None:
        k = k.masked_fill(~mask[:, None, :, None], 0.0)  # padded keys join no slot
    F = F * real[:, None, None, :]  # (B, 1 or H, k, M): padded values join no slot either
    # a slot whose E and F rows weigh no real position holds no token: it takes no part in the softmax
    weighs_E = (E.abs() * real[:, None, None, :]).sum(-1) > 0  # (B, 1 or H, k)
    occupied = (weighs_E | (F.abs().sum(-1) > 0))[:, :, None, :]  # (B, 1 or H, 1, k); F's padded columns are 0
    scores = (q @ (E @ k).transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, N, k)
    weights = torch.softmax(scores.masked_fill(~occupied, float("-inf")), dim=-1)
    weights = torch.where(occupied.any(-1, keepdim=True), weights, 0.0)  # no slot left (all padding): zeros, not NaN
    return weights @ F  # (B, H, N, k) @ (B, 1 or H, k, M) -> (B, H, N, M)


def state_readout(k, v, q):
    state = k.transpose(-2, -1) @ v  # (B, H, D, Dv): Σ_i k_i v_iᵀ, the same size for any p
    return q @ state


def recall_accuracy(k, v):
    readout = state_readout(k, v, k)  # (B, H, p, Dv): each stored key asks for its own value
    nearest = torch.cdist(readout, v).argmin(dim=-1)  # (B, H, p): the stored value closest to each readout
    own = torch.arange(k.shape[-2], device=k.device)
    return (nearest == own).to(k.dtype).mean(dim=-1)


def copy_sharpness(v, positions, tol):
    chosen = v[..., list(positions), :]  # (B, H, slots, Dv): what the copy must give back
    slots = chosen.shape[-2]
    # at sharpness s each other slot weighs 1 / (e^s + slots - 1); row j's error is that times Σ_i v_i - slots v_j
    spread = float((chosen.sum(-2, keepdim=True) - slots * chosen).abs().max())
    return math.log(spread / tol - slots + 1) if spread / tol > slots else 0.0


def pairs_held(k, v, threshold=0.9):
    held = 0
    for p in range(1, k.shape[0] + 1):
        state = k[:p].T @ v[:p]  # (D, Dv): the first p pairs in one fixed-size state
        nearest = torch.cdist(k[:p] @ state, v[:p]).argmin(dim=-1)  # (p,): the value each key reads back
        if (nearest == torch.arange(p)).to(k.dtype).mean() < threshold:
            break
        held = p
    return held
