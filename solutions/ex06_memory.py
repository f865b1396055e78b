"""Solutions for exercises/ex06_memory.py (standalone: plain arithmetic and torch, no minilin)."""
import math

import torch


def exact_saved_bytes(B, H, N, M, D, Dv, itemsize):
    probabilities = B * H * N * M  # the (B, H, N, M) softmax output, kept for both products' backward
    inputs = B * H * (N * D + M * D + M * Dv)  # q, k (for the scores' backward) and v (for P v's)
    return (probabilities + inputs) * itemsize


def linformer_saved_bytes(B, H, N, n, D, Dv, k, itemsize, shared):
    probabilities = B * H * N * k  # (B, H, N, k)
    queries = B * H * N * D  # q, for the gradient of the projected keys
    projected = B * H * k * (D + Dv)  # E K (for q's gradient) and F V (for the probabilities' gradient)
    projections = (1 if shared else 2) * k * n  # E for K's gradient, F for V's: one storage when E is F
    return (probabilities + queries + projected + projections) * itemsize


def flop_crossover(method, dim_head, size=None):
    D = dim_head
    per_length = {  # counted FLOPs per head are c · n for the linear methods; exact attention counts 4 n² D
        "performer": lambda m: 4 * D * m + 4 * m * (D + 1),
        "linear": lambda _: 4 * D * (D + 1),
        "linformer": lambda k: 8 * k * D,
    }
    if method not in per_length:
        raise ValueError(f"unknown method {method!r}; choose one of {tuple(per_length)}")
    c = per_length[method](size)
    return c // (4 * D) + 1  # the smallest n with 4 n² D > c n, i.e. n > c / 4D


def key_block_attention(q, k, v, block):
    lse = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype, device=q.device)  # no keys seen yet
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    for start in range(0, k.shape[-2], block):
        scores = q @ k[..., start:start + block, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        part_lse = torch.logsumexp(scores, dim=-1)  # this block's log-sum-exp, (B, H, N)
        part_out = torch.softmax(scores, dim=-1) @ v[..., start:start + block, :]  # attention over this block alone
        merged = torch.logaddexp(lse, part_lse)
        out = out * torch.exp(lse - merged)[..., None] + part_out * torch.exp(part_lse - merged)[..., None]
        lse = merged
    return out, lse


def causal_block_work(n, q_block, kv_block):
    work = 0
    for first in range(0, n, q_block):
        rows = min(n, first + q_block) - first
        last = first + rows - 1  # the last query of this block sees keys 0 .. last
        work += rows * min(n, (last // kv_block + 1) * kv_block)
    return work / n**2
