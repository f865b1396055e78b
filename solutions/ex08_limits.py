"""Solutions for exercises/ex08_limits.py (standalone: math and torch only)."""
import math

import torch


def convex_copy_map(sources, k):
    S = sources.shape[0]
    draw = torch.randn(S, k - 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    Q = torch.linalg.qr(draw)[0]  # (S, k - 1), orthonormal columns
    coeff = Q[sources]  # (S, k - 1): slot j takes the coefficients of position sources[j] in Q Qᵀ
    c = float(coeff.abs().max())  # a shift that makes every weight >= 0
    A = torch.cat([coeff + c, torch.full((S, 1), c, dtype=Q.dtype)], dim=1)  # (S, k); the last slot pays the shift back
    F = torch.cat([Q.T, -Q.T.sum(0, keepdim=True)], dim=0)  # (k, S): c times this last row cancels c times the others
    return A / A.sum(1, keepdim=True), F  # rows scaled to sum to 1: the argmax decode is unchanged


def copy_sharpness(v, positions, tol):
    chosen = v[..., list(positions), :]  # (B, H, slots, Dv): what the copy must give back
    slots = chosen.shape[-2]
    # at sharpness s each other slot weighs 1 / (e^s + slots - 1); row j's error is that times Σ_i v_i - slots v_j
    spread = float((chosen.sum(-2, keepdim=True) - slots * chosen).abs().max())
    return math.log(spread / tol - slots + 1) if spread / tol > slots else 0.0
