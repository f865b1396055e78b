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


def favor_causal(q, k, v, projection):
    """Task 4.5: causal FAVOR+, each key scaled by the running maximum of the exponents of the keys so far."""
    d = q.shape[-1]
    w = projection.to(q.dtype) * d ** -0.25
    qs, ks = q * d ** -0.25, k * d ** -0.25
    eq = q @ w.T - 0.5 * (qs * qs).sum(-1, keepdim=True)  # (B, H, N, m)
    ek = k @ w.T - 0.5 * (ks * ks).sum(-1, keepdim=True)  # (B, H, N, m)
    phi_q = torch.exp(eq - eq.amax(-1, keepdim=True).detach())  # each query by its own row max
    r = torch.cummax(ek.amax(-1).detach(), dim=-1).values  # (B, H, N): max over keys 0..j and features
    B, H, N, m = eq.shape
    state = q.new_zeros(B, H, m, v.shape[-1])  # Σ_{j<=i} φ(k_j) v_jᵀ, held on the scale exp(-r_i)
    z = q.new_zeros(B, H, m)
    readouts = []
    for i in range(N):
        if i:
            factor = torch.exp(r[:, :, i - 1] - r[:, :, i])  # <= 1: bring the old state to the new scale
            state, z = state * factor[..., None, None], z * factor[..., None]
        phi_k = torch.exp(ek[:, :, i] - r[:, :, i, None])  # (B, H, m), every entry <= 1
        state = state + phi_k[..., :, None] * v[:, :, i, None, :]
        z = z + phi_k
        num = (phi_q[:, :, i, :, None] * state).sum(-2)
        den = (phi_q[:, :, i] * z).sum(-1, keepdim=True)
        readouts.append(num / den)
    return torch.stack(readouts, dim=2)


def causal_prefix_attention(phi_q, phi_k, v):
    """Task 4.6: the state of the first M - N keys, then the recurrence of Task 4.4 for the N queries."""
    N, M = phi_q.shape[2], phi_k.shape[2]
    if N > M:
        raise ValueError(f"{N} queries but {M} keys: the queries must be the last N of the M positions")
    start = M - N
    state = phi_k[:, :, :start].transpose(-2, -1) @ v[:, :, :start]  # (B, H, m, Dv): the prompt, at once
    z = phi_k[:, :, :start].sum(-2)  # (B, H, m)
    readouts = []
    for i in range(N):
        state = state + phi_k[:, :, start + i, :, None] * v[:, :, start + i, None, :]
        z = z + phi_k[:, :, start + i]
        num = (phi_q[:, :, i, :, None] * state).sum(-2)
        den = (phi_q[:, :, i] * z).sum(-1, keepdim=True)
        readouts.append(num / den)
    return torch.stack(readouts, dim=2)


def positive_estimate_stats(x, y, nb_features, draws, generator):
    """Task 4.7: [mean, variance] of `draws` independent m-feature positive estimates of exp(xᵀy)."""
    w = torch.randn(draws, nb_features, x.shape[-1], generator=generator, dtype=torch.float64)  # (draws, m, D)
    terms = torch.exp(w @ (x + y) - 0.5 * (x @ x + y @ y))  # (draws, m): φ_i(x) φ_i(y) · m
    est = terms.mean(-1)  # (draws,)
    return torch.stack([est.mean(), est.var()])
