"""Solutions for exercises/ex09_gates.py (standalone: torch and math only)."""
import math

import torch


def gated_delta_loop(q, k, v, beta, log_alpha, initial_state=None):
    B, H, N, Dk = q.shape
    q = q / math.sqrt(Dk)
    state = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state
    outs = []
    for t in range(N):
        state = torch.exp(log_alpha[:, :, t])[..., None, None] * state  # forget first: α_t S_{t-1}
        predicted = torch.einsum("bhkv,bhk->bhv", state, k[:, :, t])  # what the decayed state reads at k_t
        error = v[:, :, t] - predicted
        state = state + beta[:, :, t, None, None] * k[:, :, t, :, None] * error[:, :, None, :]  # write the error
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, :, t]))
    return torch.stack(outs, dim=2), state


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


def repeated_write_error(initial_state, k, v, beta, t):
    shrink = 1 - beta * (k * k).sum(-1)  # (B, H): each write multiplies the error by 1 − β‖k‖²
    start = v - torch.einsum("bhkv,bhk->bhv", initial_state, k)
    return shrink[..., None] ** t * start


def writes_needed(beta, eps, key_norm=1.0):
    ratio = abs(1 - beta * key_norm ** 2)
    if eps >= 1:
        return 0
    if ratio == 0:
        return 1
    if ratio >= 1:
        return None
    count = max(1, math.ceil(math.log(eps) / math.log(ratio)))
    while ratio ** count > eps:  # the logarithms' round-off, on either side
        count += 1
    while count > 1 and ratio ** (count - 1) <= eps:
        count -= 1
    return count


def memory_crossover(layers, exact_layers, heads, dim_head, dim_k, dim_v, kv_itemsize, state_itemsize):
    if not 0 <= exact_layers <= layers:
        raise ValueError(f"exact_layers must be between 0 and layers = {layers}, got {exact_layers}")
    if exact_layers == layers:
        return None
    # per recurrent layer and head: its KV cache 2·n·dim_head·kv_itemsize against its state dim_k·dim_v·state_itemsize
    state = dim_k * dim_v * state_itemsize
    per_token = 2 * dim_head * kv_itemsize
    return state // per_token + 1
