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
    Hints, one tier at a time (notebook 03, section 2, steps 1-2):
      1. Slot j is a weighted sum over the *positions* of x, so E multiplies x from the left, along the M axis.
         What should a padded position contribute to that sum, and what does 0 * NaN give?
      2. Plan: keep E's first M columns, (k, M) or (H, k, M); turn mask (B, M) into (B, 1, M, 1) so it
         broadcasts over heads and features; zero x there; one matrix product gives (B, H, k, D).
      3. Formula: with a mask, first set x to zero at every padded position (the mask viewed as (B, 1, M, 1));
         the result is E restricted to its first M columns, matrix-multiplied with x (a (k, M) or (H, k, M)
         matrix broadcasts over (B, H, M, D)).
    """
    raise NotImplementedError("Task 3.1")


def linformer_forward(q, k, v, E, F, mask=None):
    """Task 3.2: Linformer attention softmax(q (E k)ᵀ / √D) (F v) (paper eq. 7, arXiv 2006.04768).

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), E, F as above  ->  (B, H, N, Dv)
    Project k with E and v with F (your project_sequence, with the mask), then exact attention over the k slots.
    Raise ValueError if M exceeds the number of columns of E (Linformer has a fixed maximum length).
    You may assume dense E, F (every slot receives some real position).

    Hints, one tier at a time (notebook 03, section 2, `my_linformer`):
      1. After the projection this is ordinary exact attention, with k projected keys and values in place of
         the M keys and values. Which function that you may call already does exact attention?
      2. Plan: check M against E.shape[-1] first; k_proj = project(k, E), v_proj = project(v, F), both
         (B, H, k, D); scores q k_projᵀ / √D are (B, H, N, k); softmax over the last axis; times v_proj gives
         (B, H, N, Dv). No mask is needed after the projection: padding is already out of every slot.
      3. In formulas: out = softmax(q (E K)ᵀ / √D) (F V), with E K and F V the projected (masked) keys and
         values of Task 3.1, and exact attention on the k slots; first refuse a sequence longer than E's n
         columns with a ValueError that says so.
    """
    raise NotImplementedError("Task 3.2")


def projection_matrix_count(sharing, layers, heads):
    """Task 3.3: how many (k, n) projection matrices a Linformer with `layers` layers of `heads` heads stores.

    sharing: "none" (E_i, F_i per head), "headwise" (one E, one F per layer), "kv" (E = F per layer),
    "layerwise" (a single E for the whole model). Paper sec. 4: a 12-layer 12-head model stores 24 / 12 / 1
    matrices for headwise / kv / layerwise. Raise ValueError for any other `sharing`.

    Hints, one tier at a time (notebook 03, section 6):
      1. Count per layer first (how many matrices does one layer keep in each mode?), then decide which modes
         multiply by the number of layers.
      2. Plan: "none" keeps an E and an F per head; "headwise" one E and one F per layer; "kv" one matrix per
         layer; "layerwise" one matrix in all. A dict from mode to count, after a membership check.
      3. none: 2·layers·heads, headwise: 2·layers, kv: layers, layerwise: 1.
    """
    raise NotImplementedError("Task 3.3")


def fan_in_init(k, n, generator, dtype=torch.float64):
    """Task 3.4: a (k, n) projection whose projected keys keep the scale of the keys: entries N(0, 1/n).

    Slot j of E K sums n keys, Var[(E K)_j] = n · Var[E_ji] · Var[K]; choose Var[E_ji] so the ratio is 1.
    Draw from `generator` (torch.randn(..., generator=generator)).

    Hints, one tier at a time (notebook 03, section 5):
      1. Var[(E K)_j] / Var[K] = n · Var[E_ji]. Which variance makes this 1, and how do you scale a standard
         normal to have it?
      2. Plan: one (k, n) standard-normal draw from the generator, in the requested dtype, times a scalar.
      3. In formulas: E_ij ~ N(0, 1/n), i.e. standard normal draws (from `generator`, in `dtype`) times 1/√n.
    """
    raise NotImplementedError("Task 3.4")
