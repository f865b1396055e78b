"""Solutions for notebook 04 (Performer, FAVOR+). Standalone: the same API as exercises/ex04_performer.py."""
import math

import torch


def positive_random_features(x, projection):
    """Task 4.1: φ(x) = exp(Wx − |x|²/2) / √m, (..., N, D) -> (..., N, m)."""
    m = projection.shape[0]
    return torch.exp(x @ projection.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(m)


def orthogonal_projection(nb_features, dim, generator):
    """Task 4.2: block-orthogonal Gaussian rows with chi(D) lengths, float64 (m, D)."""
    blocks = []
    for _ in range(-(-nb_features // dim)):
        q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))
        blocks.append((q * torch.sign(torch.diagonal(r))).T)  # orthonormal rows, Haar-distributed
    w = torch.cat(blocks)[:nb_features]
    lengths = torch.stack([torch.randn(dim, generator=generator, dtype=torch.float64).norm()
                           for _ in range(nb_features)])
    return w * lengths[:, None]


def favor_noncausal(q, k, v, projection):
    """Task 4.3: stabilised non-causal FAVOR+, (B, H, N, Dv)."""
    d = q.shape[-1]
    w = projection.to(q.dtype) * d ** -0.25  # scaling w by D^(-1/4) == scaling x
    qs, ks = q * d ** -0.25, k * d ** -0.25
    eq = q @ w.T - 0.5 * (qs * qs).sum(-1, keepdim=True)  # (B, H, N, m)
    ek = k @ w.T - 0.5 * (ks * ks).sum(-1, keepdim=True)  # (B, H, M, m)
    phi_q = torch.exp(eq - eq.amax(-1, keepdim=True).detach())
    phi_k = torch.exp(ek - ek.amax(dim=(-2, -1), keepdim=True).detach())
    kv = phi_k.transpose(-2, -1) @ v  # (B, H, m, Dv)
    z = phi_k.sum(-2)  # (B, H, m)
    return (phi_q @ kv) / (phi_q @ z[..., None])


def causal_linear_attention(phi_q, phi_k, v):
    """Task 4.4: the recurrence S_i = S_{i-1} + φ(k_i) v_iᵀ, z_i = z_{i-1} + φ(k_i), one position at a time."""
    B, H, N, m = phi_q.shape
    state = phi_q.new_zeros(B, H, m, v.shape[-1])
    z = phi_q.new_zeros(B, H, m)
    outs = []
    for i in range(N):
        state = state + phi_k[:, :, i, :, None] * v[:, :, i, None, :]
        z = z + phi_k[:, :, i]
        num = (phi_q[:, :, i, :, None] * state).sum(-2)  # (B, H, Dv)
        den = (phi_q[:, :, i] * z).sum(-1, keepdim=True)
        outs.append(num / den)
    return torch.stack(outs, dim=2)
