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


def blocked_attention_backward(q, k, v, out, lse, dout, block):
    scale = 1 / math.sqrt(q.shape[-1])
    delta = (dout * out).sum(-1, keepdim=True)  # (B, H, N, 1): the softmax's gradient needs each row's dout · out
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for start in range(0, k.shape[-2], block):
        keys = slice(start, start + block)
        kb, vb = k[..., keys, :], v[..., keys, :]
        p = torch.exp(q @ kb.transpose(-2, -1) * scale - lse[..., None])  # (B, H, N, c): this block's probabilities
        dv[..., keys, :] = p.transpose(-2, -1) @ dout
        ds = p * (dout @ vb.transpose(-2, -1) - delta)  # the scores' gradient
        dq += ds @ kb * scale  # every block of keys adds its share to the queries' gradient
        dk[..., keys, :] = ds.transpose(-2, -1) @ q * scale
    return dq, dk, dv


def causal_block_work(n, q_block, kv_block):
    work = 0
    for first in range(0, n, q_block):
        rows = min(n, first + q_block) - first
        last = first + rows - 1  # the last query of this block sees keys 0 .. last
        work += rows * min(n, (last // kv_block + 1) * kv_block)
    return work / n**2
