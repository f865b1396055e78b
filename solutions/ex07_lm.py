"""Solutions for notebook 07 (exercises/ex07_lm.py): the pieces of a byte-level LM's training loop, and decoding."""
import math
import os
from pathlib import Path

import torch

MASK_ID = 256
IGNORE = -100


def encode_bytes(text):
    """Task 7.1 (a): text -> (N,) long tensor of UTF-8 bytes."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode_bytes(ids):
    """Task 7.1 (b): ids -> text; invalid UTF-8 becomes U+FFFD."""
    return bytes(torch.as_tensor(ids).tolist()).decode("utf-8", errors="replace")


def shift_for_next_token(window):
    """Task 7.2: (B, L + 1) -> inputs (B, L), targets (B, L) with targets[:, t] = window[:, t + 1]."""
    return window[:, :-1], window[:, 1:]


def lm_loss(logits, targets):
    """Task 7.3 (a): mean -log p(target) over positions whose target is not IGNORE."""
    keep = targets != IGNORE  # (B, L)
    logp = torch.log_softmax(logits, dim=-1)  # (B, L, V)
    picked = logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]  # (B, L); IGNORE rows picked, dropped
    return -(picked * keep).sum() / keep.sum()


def bits_per_byte(loss_nats):
    """Task 7.3 (b): nats -> bits."""
    return float(loss_nats) / math.log(2.0)


def mask_for_mlm(tokens, *, generator, mask_prob=0.15):
    """Task 7.4: BERT 80/10/10 corruption."""
    selected = torch.rand(tokens.shape, generator=generator) < mask_prob
    u = torch.rand(tokens.shape, generator=generator)
    random_bytes = torch.randint(256, tokens.shape, generator=generator)
    corrupted = tokens.clone()
    corrupted[selected & (u < 0.8)] = MASK_ID
    swap = selected & (u >= 0.8) & (u < 0.9)
    corrupted[swap] = random_bytes[swap]
    targets = torch.full_like(tokens, IGNORE)
    targets[selected] = tokens[selected]
    return corrupted, targets


def lr_at(step, *, lr, steps, warmup, min_lr):
    """Task 7.5: linear warm-up then cosine decay to min_lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, steps - warmup))
    return min_lr + (lr - min_lr) * (1.0 + math.cos(math.pi * p)) / 2.0


def save_checkpoint(obj, path):
    """Task 7.6 (a): temp file + os.replace."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_checkpoint(path):
    """Task 7.6 (b): weights_only load."""
    return torch.load(path, map_location="cpu", weights_only=True)


def top_p_filter(logits, top_p):
    """Task 7.7: keep the likeliest tokens until their probability reaches top_p; the others -inf."""
    probs = torch.softmax(logits, dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = torch.cat([torch.zeros_like(sorted_p[..., :1]), sorted_p.cumsum(dim=-1)[..., :-1]], dim=-1)
    keep = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < top_p)
    return logits.masked_fill(~keep, float("-inf"))


def efficient_decode_step(q_t, k_t, v_t, state=None):
    """Task 7.8: add exp(k_t) v_tᵀ and exp(k_t) to the state, read it with softmax(q_t)."""
    phi_q, phi_k = torch.softmax(q_t, dim=-1), torch.exp(k_t)  # (B, H, D)
    S = torch.einsum("bhd,bhe->bhde", phi_k, v_t)
    z = phi_k
    if state is not None:
        S, z = state[0] + S, state[1] + z
    num = torch.einsum("bhd,bhde->bhe", phi_q, S)
    return num / torch.einsum("bhd,bhd->bh", phi_q, z)[..., None], (S, z)
