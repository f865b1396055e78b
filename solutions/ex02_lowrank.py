"""Solutions for exercises/ex02_lowrank.py (standalone: torch only)."""
import math

import torch


def rank_for_error(P, max_error):
    """Task 2.1: Eckart-Young backwards: the error budget gives the rank, from the tail sums of s²."""
    if not 0.0 <= max_error < 1.0:
        raise ValueError(f"max_error is a relative error in [0, 1), got {max_error}")
    tail = (torch.linalg.svdvals(P.to(torch.float64)) ** 2).flip(-1).cumsum(-1).flip(-1)   # tail[j] = Σ_{i >= j} s_i²
    budget = (max_error ** 2 + 1e-12) * tail[..., :1]                                   # allowed ||P - P_r||², (..., 1)
    return 1 + (tail[..., 1:] > budget).sum(-1)                                         # ranks 1..q-1 still above it


def one_hot_spectrum(picks, n_keys):
    """Task 2.2: Pᵀ P = diag(counts), so the singular values are the square roots of the counts."""
    hits = torch.nn.functional.one_hot(picks.long(), n_keys).sum(-2)                    # (..., n_keys): c_j
    ordered = torch.sort(hits.to(torch.float64).sqrt(), dim=-1, descending=True).values
    return ordered[..., :min(picks.shape[-1], n_keys)]


def jl_projected_length(P, value_mean, max_error):
    """Task 2.3: E err² = (E||P||²||V||² + E||PV||²) / k over R and the noise, with V = 1 μᵀ + Z, solved for k."""
    P, value_mean = P.to(torch.float64), value_mean.to(torch.float64)
    n, dv = P.shape[-1], value_mean.shape[-1]
    p2 = P.square().sum((-2, -1))                                  # ||P||_F²
    m2 = value_mean.square().sum(-1)                               # ||μ||²
    ctx2 = P.sum(-1).square().sum(-1) * m2 + dv * p2               # E||PV||²: the mean through P 1, the noise through P
    rho = p2 * n * (m2 + dv) / ctx2                                # E||V||² = n (||μ||² + Dv)
    return torch.ceil((rho + 1) / max_error ** 2 - 1e-9).long()


def predicted_window_rank(n, width):
    """Task 2.4: the circulant box's singular values in closed form (a sampled sinc), counted to 90% energy."""
    f = torch.arange(1, n, dtype=torch.float64)
    sinc = (torch.sin(math.pi * f * width / n) / (width * torch.sin(math.pi * f / n))).abs()
    weights = torch.cat([torch.ones(1, dtype=torch.float64), sinc]).square().sort(descending=True).values
    share = weights.cumsum(0) / weights.sum()
    return int((share < 0.9 - 1e-12).sum()) + 1


def truncation_errors(P):
    """Task 2.5: ‖P - P_r‖_F and ‖P - P_r‖_2 for r = 1..q from the spectrum alone (Eckart-Young-Mirsky)."""
    s = torch.linalg.svdvals(P.to(torch.float64))  # (..., q), largest first
    zero = torch.zeros_like(s[..., :1])
    tail = (s ** 2).flip(-1).cumsum(-1).flip(-1)  # tail[r] = Σ_{i >= r} s_i² (0-based)
    frobenius = torch.cat([tail[..., 1:], zero], -1).clamp_min(0.0).sqrt()  # rank r leaves s_{r+1}, s_{r+2}, ...
    spectral = torch.cat([s[..., 1:], zero], -1)  # the largest singular value left out
    return frobenius, spectral


def band_rank(q, k, width, threshold=0.9):
    """Task 2.6: the rank at `threshold` energy of causal attention in which query i sees keys i-width+1..i."""
    if width < 1:
        raise ValueError(f"width must be >= 1 (the band holds the diagonal and width - 1 keys before it), got {width}")
    n = q.shape[-2]
    lag = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (n, n) query minus key position
    inside = (lag >= 0) & (lag < width)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, n, n)
    P = torch.softmax(scores.masked_fill(~inside, float("-inf")), dim=-1)  # the diagonal is always inside
    e = torch.linalg.svdvals(P.to(torch.float64)) ** 2
    e = e.cumsum(-1) / e.sum(-1, keepdim=True)
    return (e < threshold - 1e-12).sum(-1) + 1
