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


def truncation_errors(P):
    """Task 2.6: ‖P - P_r‖_F and ‖P - P_r‖_2 for r = 1..q from the spectrum alone (Eckart-Young-Mirsky)."""
    s = torch.linalg.svdvals(P.to(torch.float64))  # (..., q), largest first
    zero = torch.zeros_like(s[..., :1])
    tail = (s ** 2).flip(-1).cumsum(-1).flip(-1)  # tail[r] = Σ_{i >= r} s_i² (0-based)
    frobenius = torch.cat([tail[..., 1:], zero], -1).clamp_min(0.0).sqrt()  # rank r leaves s_{r+1}, s_{r+2}, ...
    spectral = torch.cat([s[..., 1:], zero], -1)  # the largest singular value left out
    return frobenius, spectral


def band_rank(q, k, width, threshold=0.9):
    """Task 2.7: the rank at `threshold` energy of causal attention in which query i sees keys i-width+1..i."""
    if width < 1:
        raise ValueError(f"width must be >= 1 (the band holds the diagonal and width - 1 keys before it), got {width}")
    n = q.shape[-2]
    lag = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n) query minus key position
    inside = (lag >= 0) & (lag < width)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, n, n)
    P = torch.softmax(scores.masked_fill(~inside, float("-inf")), dim=-1)  # the diagonal is always inside
    return rank_at_energy(torch.linalg.svdvals(P.to(torch.float64)), threshold)
