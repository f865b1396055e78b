"""Solutions for notebook 04 (Performer, FAVOR+). Standalone: the same API as exercises/ex04_performer.py."""
import math

import torch


def hyperbolic_random_features(x, projection):
    """Task 4.1: φ(x) = exp(−|x|²/2) / √(2m) · [exp(Wx), exp(−Wx)], (..., N, D) -> (..., N, 2m)."""
    m = projection.shape[0]
    proj = x @ projection.T  # (..., N, m): every wᵢᵀx
    scale = torch.exp(-0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(2 * m)
    return torch.cat([torch.exp(proj), torch.exp(-proj)], dim=-1) * scale


def hyperbolic_variance(x, y, nb_features):
    """Task 4.1, part 2: Var φ(x)·φ(y) = SM² (e^|s|² − 1)(1 − e^−|s|²) / (2m), s = x + y, SM = exp(xᵀy)."""
    s2 = ((x + y) ** 2).sum(-1)
    return torch.exp(2 * (x * y).sum(-1)) * torch.expm1(s2) * -torch.expm1(-s2) / (2 * nb_features)


def orthogonal_projection(nb_features, dim, generator):
    """Task 4.2: block-orthogonal Gaussian rows with chi(D) lengths, float64 (m, D)."""
    nb_blocks = -(-nb_features // dim)
    q, r = torch.linalg.qr(torch.randn(nb_blocks, dim, dim, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]  # Haar-distributed columns
    w = q.transpose(-2, -1).reshape(nb_blocks * dim, dim)[:nb_features]  # the columns of each Q as rows
    lengths = torch.randn(nb_features, dim, generator=generator, dtype=torch.float64).norm(dim=-1)  # chi(D)
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


def sliding_window_linear_attention(phi_q, phi_k, v, window):
    """Task 4.4: query i sees keys i − window < j ≤ i: the prefix sums up to i minus those up to i − window."""
    N = phi_q.shape[2]
    kv = torch.cat([torch.zeros_like(v[:, :, :1]), v], dim=2)  # (B, H, N + 1, Dv): a zero row in front
    kk = torch.cat([torch.zeros_like(phi_k[:, :, :1]), phi_k], dim=2)  # (B, H, N + 1, m)
    totals = (kk[..., :, None] * kv[..., None, :]).cumsum(2)  # (B, H, N + 1, m, Dv): P_i = Σ_{j<i} φ(k_j) v_jᵀ
    norms = kk.cumsum(2)  # (B, H, N + 1, m)
    hi = torch.arange(1, N + 1)
    lo = (hi - window).clamp(min=0)
    state, z = totals[:, :, hi] - totals[:, :, lo], norms[:, :, hi] - norms[:, :, lo]
    return (phi_q[..., None, :] @ state)[..., 0, :] / (phi_q * z).sum(-1, keepdim=True)


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


def orthogonal_mse(x, y, nb_features, draws, generator):
    """Task 4.7: [MSE with iid rows, MSE with block-orthogonal rows] of the m-direction hyperbolic estimate."""
    m, d = nb_features, x.shape[-1]
    truth = torch.exp(x @ y)
    iid = torch.randn(draws, m, d, generator=generator, dtype=torch.float64)
    blocks = -(-m // d)
    ortho = orthogonal_projection(draws * blocks * d, d, generator).view(draws, blocks * d, d)[:, :m]
    mse = []
    for w in (iid, ortho):  # (draws, m, D): one projection per estimate
        est = torch.exp(-0.5 * (x @ x + y @ y)) * torch.cosh(w @ (x + y)).mean(-1)  # (draws,)
        mse.append((est - truth).pow(2).mean())
    return torch.stack(mse)
