"""Solutions for notebook 05 (exercises/ex05_peers.py): efficient attention, weight transplants, chunked causal
linear attention, where LAT's causal clamp starts to act."""
import math

import torch


def efficient_attention(q, k, v, mask=None):
    """Task 5.1: softmax(q, features) @ (softmax(k, positions)ᵀ @ v), padded keys excluded."""
    rho_k = torch.softmax(k if mask is None else k.masked_fill(~mask[:, None, :, None], float("-inf")), dim=-2)
    if mask is not None:  # (B, H, M, D); a sequence with no real key: 0/0 = NaN everywhere, set to 0
        rho_k = torch.where(mask.any(dim=-1)[:, None, None, None], rho_k, torch.zeros_like(rho_k))
    context = torch.einsum("bhmd,bhme->bhde", rho_k, v)  # (B, H, D, Dv)
    return torch.einsum("bhnd,bhde->bhne", torch.softmax(q, dim=-1), context)


def causal_efficient_attention(q, k, v):
    """Task 5.2: prefix sums of exp(k_j) v_jᵀ and exp(k_j), read at each query's own position."""
    phi_q, phi_k = torch.softmax(q, dim=-1), torch.exp(k)
    kv = torch.einsum("bhnd,bhne->bhnde", phi_k, v).cumsum(dim=2)  # (B, H, N, D, Dv): keys 0..i
    ks = phi_k.cumsum(dim=2)  # (B, H, N, D)
    num = torch.einsum("bhnd,bhnde->bhne", phi_q, kv)
    den = torch.einsum("bhnd,bhnd->bhn", phi_q, ks)  # > 0: query i sees at least key i
    return num / den.unsqueeze(-1)


def transplant_into_lat(ours, lat, causal=False):
    """Task 5.3: same q/k/v weights; non-causal, to_out weight × √D because their output is ours × D^-1/2;
    causal, their D^-1/2 scales the numerator and the denominator alike and cancels (clamp inactive)."""
    factor = 1.0 if causal else ours.dim_head ** 0.5
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v"):
            getattr(lat, name).weight.copy_(getattr(ours, name).weight)
        lat.to_out.weight.copy_(ours.to_out.weight * factor)
        lat.to_out.bias.copy_(ours.to_out.bias)
    return lat


def linformer_into_ours(theirs, ours):
    """Task 5.4: E = proj_kᵀ, F = proj_vᵀ, the four Linear layers by name."""
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v", "to_out"):
            getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())
        ours.E.copy_(theirs.proj_k.T)
        ours.F.copy_(theirs.proj_v.T)
    return ours


def chunked_causal_linear_attention(q, k, v, chunk_size, mask=None):
    """Task 5.6: inside a chunk the masked (C × C) form, across chunks the running sums S and z."""
    phi_q = torch.nn.functional.elu(q) + 1
    phi_k = torch.nn.functional.elu(k) + 1
    if mask is not None:
        phi_k = phi_k * mask[:, None, :, None].to(phi_k.dtype)  # padded keys: features 0, in S and in z
    B, H, N, F = phi_q.shape
    state = q.new_zeros(B, H, F, v.shape[-1])  # Σ φ(k_j) v_jᵀ over the earlier chunks
    norm = q.new_zeros(B, H, F)  # Σ φ(k_j) over the earlier chunks
    pieces = []
    for start in range(0, N, chunk_size):
        fq, fk, vc = (t[:, :, start:start + chunk_size] for t in (phi_q, phi_k, v))
        inside = (fq @ fk.transpose(-2, -1)).tril()  # (B, H, C, C): φ(q_i)·φ(k_j), j <= i inside the chunk
        num = fq @ state + inside @ vc
        den = torch.einsum("bhcf,bhf->bhc", fq, norm) + inside.sum(-1)
        safe = torch.where(den > 0, den, torch.ones_like(den))
        pieces.append(torch.where(den[..., None] > 0, num / safe[..., None], torch.zeros_like(num)))
        state = state + fk.transpose(-2, -1) @ vc
        norm = norm + fk.sum(dim=-2)
    return torch.cat(pieces, dim=2)


def clamp_onset(q, k, bucket_size=1):
    """Task 5.8: LAT clamps D^-1/2 φ_q(q_i)·z_i at 1e-3, and a shift s multiplies z_i by e^s: the onset is the s
    at which the smallest visible denominator, times e^s, reaches 1e-3 √D."""
    n, d = q.shape[-2:]
    prefix = torch.exp(k).cumsum(dim=2)  # (B, H, N, D): z_j = Σ_{l <= j} e^{k_l}
    i = torch.arange(n)
    last = i if bucket_size == 1 else (i // bucket_size) * bucket_size - 1  # last visible key (-1: none)
    seen = last >= 0
    den = torch.einsum("bhnd,bhnd->bhn", torch.softmax(q, dim=-1)[:, :, seen], prefix[:, :, last[seen]])
    return math.log(1e-3 * math.sqrt(d)) - math.log(den.min().item())


def past_changes(layer, x):
    """Task 5.10: for each split t0, the largest move of the outputs before t0 when the inputs from t0 on are
    scaled by 10 and by -10 (large enough to move any maximum over all positions, both signs)."""
    n = x.shape[1]
    readings = torch.zeros(n, dtype=torch.float64)
    with torch.no_grad():
        before = layer(x)
        for t0 in range(1, n):
            keep = torch.arange(n)[None, :, None] < t0  # (1, N, 1): the positions left as they were
            for factor in (10.0, -10.0):
                moved = layer(torch.where(keep, x, factor * x))[:, :t0] - before[:, :t0]
                readings[t0] = torch.maximum(readings[t0], moved.abs().max())
    return readings
