"""Solutions for notebook 07 (exercises/ex07_lm.py): the pieces of a byte-level LM's training loop, decoding, and a
token-shift mixing step."""
import os
from pathlib import Path

import torch

MASK_ID = 256
IGNORE = -100


def truncate_utf8(ids, max_bytes):
    """Task 7.1: the longest prefix of at most max_bytes bytes that ends on a character boundary."""
    n = len(ids)
    cut = min(max_bytes, n)
    while 0 < cut < n and int(ids[cut]) & 0xC0 == 0x80:  # byte `cut` continues a character: do not split it
        cut -= 1
    return ids[:cut].clone()


def shift_with_documents(window, eos):
    """Task 7.2: the shift of section 2, with no loss on the first byte of a new document."""
    inputs = window[:, :-1]
    targets = window[:, 1:].masked_fill(inputs == eos, IGNORE)  # masked_fill returns a new tensor
    return inputs, targets


def lm_loss(logits, targets):
    """Task 7.3: mean -log p(target) over positions whose target is not IGNORE."""
    keep = targets != IGNORE  # (B, L)
    logp = torch.log_softmax(logits, dim=-1)  # (B, L, V)
    picked = logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]  # (B, L); IGNORE rows picked, dropped
    return -(picked * keep).sum() / keep.sum()


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


def wsd_lr(step, *, lr, steps, warmup, decay, min_lr):
    """Task 7.5: warm-up, stable, linear decay to min_lr."""
    if step >= steps:
        return float(min_lr)
    if step < warmup:
        return lr * (step + 1) / warmup
    start = steps - decay
    if step <= start:
        return float(lr)
    p = min(1.0, (step - start) / decay)
    return lr + (min_lr - lr) * p


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


def predicted_crossover(heads, head_dim, features):
    """Task 7.9: the first t with 2·t·D > F·D + F (per head; heads and layers scale both sides alike)."""
    return (features * head_dim + features) // (2 * head_dim) + 1


def shifted_linear_mix(q, k, v, mu):
    """Task 7.10: keys and values mixed with the previous position's by mu (zeros before position 0), then causal
    elu+1 linear attention by prefix sums."""
    if isinstance(mu, torch.Tensor):
        mu = mu.to(q).reshape(1, -1, 1, 1)  # (1, H, 1, 1): one mu per head, on q's device
    earlier = lambda t: torch.cat([torch.zeros_like(t[:, :, :1]), t[:, :, :-1]], dim=2)  # t_{n-1}, zeros at 0
    k_mix, v_mix = (mu * t + (1 - mu) * earlier(t) for t in (k, v))
    fq, fk = (torch.where(t > 0, t + 1, t.clamp(max=0).exp()) for t in (q, k_mix))  # elu(t) + 1, no 0/0 far below 0
    S = torch.einsum("bhnd,bhne->bhnde", fk, v_mix).cumsum(dim=2)  # Σ_{j<=n} φ(k'_j) v'_jᵀ
    num = torch.einsum("bhnd,bhnde->bhne", fq, S)
    den = (fq * fk.cumsum(dim=2)).sum(dim=-1, keepdim=True)
    return num / den
