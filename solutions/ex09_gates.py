"""Solutions for exercises/ex09_gates.py (standalone: torch and math only)."""
import math

import torch


def chunked_gated_delta(q, k, v, beta, log_alpha, chunk_size, initial_state=None):
    B, H, N, Dk = q.shape
    q = q / math.sqrt(Dk)
    state = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state
    outs = []
    for start in range(0, N, chunk_size):  # N/C chunks; the last may be shorter
        stop = min(start + chunk_size, N)
        qc, kc, vc, bc = q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop], beta[:, :, start:stop]
        b = log_alpha[:, :, start:stop].cumsum(dim=2)  # (B, H, c): log decay from the chunk's start to token i
        c = stop - start
        below = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        decay = torch.exp((b[..., :, None] - b[..., None, :]).masked_fill(~below, float("-inf")))  # e^(b_i − b_j)
        lower = torch.tril(bc[..., None] * (kc @ kc.transpose(-2, -1)) * decay, diagonal=-1)  # L, strictly lower
        rhs = torch.cat([bc[..., None] * vc, (bc * torch.exp(b))[..., None] * kc], dim=-1)
        uw = torch.linalg.solve_triangular(lower + torch.eye(c, dtype=q.dtype, device=q.device), rhs, upper=False,
                                           unitriangular=True)
        delta = uw[..., :v.shape[-1]] - uw[..., v.shape[-1]:] @ state  # Δ = U − W S_0: the corrected values
        outs.append(torch.exp(b)[..., None] * (qc @ state) + ((qc @ kc.transpose(-2, -1)) * decay) @ delta)
        kc_end = kc * torch.exp(b[..., -1:] - b).unsqueeze(-1)  # (B, H, c, Dk): key j decayed to the chunk's end
        state = torch.exp(b[..., -1])[..., None, None] * state + kc_end.transpose(-2, -1) @ delta
    return torch.cat(outs, dim=2), state


def chunked_gla(q, k, v, log_gate, chunk_size, initial_state=None):
    B, H, N, Dk = q.shape
    q = q / math.sqrt(Dk)
    state = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state
    outs = []
    for start in range(0, N, chunk_size):  # the last chunk may be shorter
        stop = min(start + chunk_size, N)
        qc, kc, vc = q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop]
        b = log_gate[:, :, start:stop].cumsum(dim=2)  # (B, H, c, Dk): log decay from the chunk's start to token i
        c = stop - start
        below = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        gap = (b[:, :, :, None, :] - b[:, :, None, :, :]).masked_fill(~below[..., None], float("-inf"))
        scores = (qc[:, :, :, None, :] * kc[:, :, None, :, :] * torch.exp(gap)).sum(-1)  # (B, H, c, c), j <= i
        outs.append((qc * torch.exp(b)) @ state + scores @ vc)  # the carried state, then the chunk itself
        b_end = b[:, :, -1:]  # (B, H, 1, Dk): the whole chunk's decay
        state = torch.exp(b_end).transpose(-2, -1) * state + (kc * torch.exp(b_end - b)).transpose(-2, -1) @ vc
    return torch.cat(outs, dim=2), state


def repeated_write_error(initial_state, k, v, beta, log_alpha, t):
    # one write: r ← α(1 − βc) r + βc v with r = Sᵀk and c = |k|², so the error e = v − r obeys
    # e ← ρ e + (1 − α)(1 − βc) v with ρ = α(1 − βc); unrolled, e_t = ρ^t e_0 + (1 + ρ + … + ρ^(t−1)) (1 − α)(1 − βc) v
    alpha, c = torch.exp(log_alpha), (k * k).sum(-1)  # (B, H)
    rho = alpha * (1 - beta * c)
    start = v - torch.einsum("bhkv,bhk->bhv", initial_state, k)
    flat = rho == 1  # the geometric sum is t there, not 0/0
    geometric = torch.where(flat, float(t), (1 - rho ** t) / torch.where(flat, 2.0, 1 - rho))
    return rho[..., None] ** t * start + ((1 - alpha) * (1 - beta * c) * geometric)[..., None] * v


def memory_crossover(layers, exact_layers, heads, dim_head, dim_k, dim_v, kv_itemsize, state_itemsize):
    if not 0 <= exact_layers <= layers:
        raise ValueError(f"exact_layers must be between 0 and layers = {layers}, got {exact_layers}")
    if exact_layers == layers:
        return None
    # per recurrent layer and head: its KV cache 2·n·dim_head·kv_itemsize against its state dim_k·dim_v·state_itemsize
    state = dim_k * dim_v * state_itemsize
    per_token = 2 * dim_head * kv_itemsize
    return state // per_token + 1


def chunked_gated_retention(q, k, v, log_alpha, chunk_size, initial_state=None):
    B, H, N, Dk = q.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state  # (B, H, Dk, Dv)
    outs = []
    for first in range(0, N, chunk_size):  # N/C steps; a ragged last chunk holds the remaining tokens
        Qc, Kc, Vc = (x[:, :, first:first + chunk_size] for x in (q, k, v))  # (B, H, c, D), c <= chunk_size
        cum = log_alpha[:, :, first:first + chunk_size].cumsum(dim=-1)  # (B, H, c): log α_0 + ... + log α_i
        c = cum.shape[-1]
        gap = cum[..., :, None] - cum[..., None, :]  # (B, H, c, c): b_i − b_j, <= 0 on and below the diagonal
        Gamma = torch.exp(gap.masked_fill(~torch.ones(c, c, dtype=torch.bool, device=q.device).tril(), -math.inf))
        outs.append(torch.exp(cum)[..., None] * (Qc @ S) + ((Qc @ Kc.transpose(-2, -1)) * Gamma) @ Vc)
        to_end = torch.exp(cum[..., -1:] - cum)[..., None]  # (B, H, c, 1): key j's decay to the chunk's end
        S = torch.exp(cum[..., -1])[..., None, None] * S + (to_end * Kc).transpose(-2, -1) @ Vc
    return torch.cat(outs, dim=2), S
