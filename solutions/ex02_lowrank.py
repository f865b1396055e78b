"""Solutions for exercises/ex02_lowrank.py (standalone: torch only)."""
import torch


def cumulative_energy(s):
    w = s.to(torch.float64) ** 2
    return w.cumsum(-1) / w.sum(-1, keepdim=True)


def rank_at_energy(s, threshold=0.9):
    e = cumulative_energy(s)
    return (e < threshold - 1e-12).sum(-1) + 1  # the tolerance lets threshold=1.0 survive round-off


def effective_rank(s):
    p = s.to(torch.float64) / s.sum(-1, keepdim=True)
    plogp = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, torch.ones_like(p))), torch.zeros_like(p))
    return torch.exp(-plogp.sum(-1))


def best_rank_approx(P, r):
    U, S, Vh = torch.linalg.svd(P, full_matrices=False)
    return (U[..., :r] * S[..., None, :r]) @ Vh[..., :r, :]


def jl_context(P, v, R):
    return (P @ R.T) @ (R @ v)  # (..., n, k) @ (..., k, Dv)
