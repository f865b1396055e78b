"""Exercises for notebook 03: the Linformer layer.

Implement each function, then grade yourself:  python -m minilin grade --chapter 3
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); mask (B, M) bool with
True = real token. Projections E, F are (k, seq_len) shared by heads, or (H, k, seq_len) one per head, with
seq_len >= M. Do not call minilin.linformer here (minilin.attention.softmax_attention is allowed).
"""
import torch


def project_sequence(x, E, mask=None):
    """Task 3.1: project keys (or values) along the sequence axis: slot j = Σ_i E[j, i] · x_i.

    x: (B, H, M, D), E: (k, seq_len) or (H, k, seq_len), mask: (B, M) bool or None  ->  (B, H, k, D)
    Use only the first M columns of E (shorter sequences). Padded positions (mask False) must contribute nothing,
    even if x holds NaN there: zero them with `masked_fill` *before* projecting (a product with 0 keeps NaN).
    Hint: `E[..., :M] @ x` broadcasts a (k, M) or an (H, k, M) matrix over (B, H, M, D).
    """
    raise NotImplementedError("Task 3.1")


def linformer_forward(q, k, v, E, F, mask=None):
    """Task 3.2: Linformer attention softmax(q (E k)ᵀ / √D) (F v) (paper eq. 7, arXiv 2006.04768).

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), E, F as above  ->  (B, H, N, Dv)
    Project k with E and v with F (your project_sequence, with the mask), then exact attention over the k slots.
    Raise ValueError if M exceeds the number of columns of E (Linformer has a fixed maximum length).
    You may assume dense E, F (every slot receives some real position).
    """
    raise NotImplementedError("Task 3.2")


def projection_matrix_count(sharing, layers, heads):
    """Task 3.3: how many (k, n) projection matrices a Linformer with `layers` layers of `heads` heads stores.

    sharing: "none" (E_i, F_i per head), "headwise" (one E, one F per layer), "kv" (E = F per layer),
    "layerwise" (a single E for the whole model). Paper sec. 4: a 12-layer 12-head model stores 24 / 12 / 1
    matrices for headwise / kv / layerwise. Raise ValueError for any other `sharing`.
    """
    raise NotImplementedError("Task 3.3")


def fan_in_init(k, n, generator, dtype=torch.float64):
    """Task 3.4: a (k, n) projection whose projected keys keep the scale of the keys: entries N(0, 1/n).

    Slot j of E K sums n keys, Var[(E K)_j] = n · Var[E_ji] · Var[K]; choose Var[E_ji] so the ratio is 1.
    Draw from `generator` (torch.randn(..., generator=generator)).
    """
    raise NotImplementedError("Task 3.4")
