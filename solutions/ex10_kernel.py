"""Solutions for exercises/ex10_kernel.py (standalone: torch and math only)."""
import math

import torch


def reverse_scan(q, k, v, log_decay=None, chunk_size=16):
    B, H, N, Dk = q.shape
    g = q.new_zeros(B, H, N) if log_decay is None else log_decay
    carried = q.new_zeros(B, H, Dk, v.shape[-1])  # Σ over later chunks of exp(B_i − B_e) k_i v_iᵀ
    pieces = []
    for first in reversed(range(0, N, chunk_size)):
        last = min(first + chunk_size, N)
        qc, kc, vc = q[:, :, first:last], k[:, :, first:last], v[:, :, first:last]
        a = torch.cumsum(g[:, :, first:last], dim=-1)  # log decay from the chunk's first token, inclusive
        at_or_after = torch.ones(last - first, last - first, dtype=torch.bool, device=q.device).triu()
        pair = torch.where(at_or_after, a.unsqueeze(-2) - a.unsqueeze(-1), -math.inf).exp()  # [j, i]: a_i − a_j
        inside = torch.einsum("bhjd,bhid,bhji,bhiv->bhjv", qc, kc, pair, vc)
        to_end = torch.exp(a[..., -1:] - a).unsqueeze(-1)  # (B, H, c, 1): token j decayed to the chunk's last
        pieces.append(inside + to_end * torch.einsum("bhjd,bhdv->bhjv", qc, carried))
        carried = torch.exp(a[..., -1]).unsqueeze(-1).unsqueeze(-1) * carried + \
            torch.einsum("bhi,bhid,bhiv->bhdv", a.exp(), kc, vc)
    return torch.cat(pieces[::-1], dim=2)


def backward_cost(n, d, chunk, itemsize):
    chunks = -(-n // chunk)
    dq_scan = 2 * (2 * chunk * chunk * d) + 2 * (2 * chunk * d * d)
    dkdv_scan = 4 * (2 * chunk * chunk * d) + 3 * (2 * chunk * d * d)
    return chunks * (dq_scan + dkdv_scan), (3 + 1 + 4 + 2) * n * d * itemsize
