"""Exercises for notebook 03: the Linformer layer.

Implement each function, then grade yourself:  python -m minilin grade --chapter 3
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); mask (B, M) bool with
True = real token. Projections E, F are (k, seq_len) shared by heads, or (H, k, seq_len) one per head, with
seq_len >= M. Do not call minilin.linformer here (minilin.attention.softmax_attention is allowed).
Tasks 3.1-3.4 revisit the notebook; Tasks 3.5 and 3.6 are extend tasks: the chapter's idea on a new case.
"""
import torch

from minilin.attention import softmax_attention


def project_sequence(x, E, mask=None):
    """Task 3.1: project keys (or values) along the sequence axis: slot j = Σ_i E[j, i] · x_i.

    Revisits notebook 03, section 2 (steps 1-2) and section 8 (short sequences and padding).
    x: (B, H, M, D), E: (k, seq_len) or (H, k, seq_len), mask: (B, M) bool or None  ->  (B, H, k, D)
    Use only the first M columns of E (shorter sequences). Padded positions (mask False) must contribute nothing,
    even if x holds NaN there (a product with 0 keeps NaN). The grader checks both E layouts, two shapes each
    (two head sizes, two lengths M < seq_len), with and without padding (NaN stored in the padding).

    Hint 1 (nudge): slot j is a weighted sum over the *positions* of x, so E acts on the M axis, from the left.
        What should a padded position add to that sum, and what does 0 times NaN give?
    Hint 2 (plan): keep E's first M columns; turn the (B, M) mask into a shape that broadcasts over heads and
        features; replace x by zero at the padded positions (a fill, not a product); one matrix product.
    Hint 3 (formula): out[b, h, j] = Σ_{i < M} E[(h,) j, i] · x̃[b, h, i], where x̃[b, h, i] = x[b, h, i] if
        mask[b, i] is True and 0 otherwise; a (k, M) or (H, k, M) matrix times (B, H, M, D) broadcasts.
    """
    raise NotImplementedError("Task 3.1")


def linformer_forward(q, k, v, E, F, mask=None):
    """Task 3.2: Linformer attention softmax(q (E k)ᵀ / √D) (F v) (paper eq. 7, arXiv 2006.04768).

    Revisits notebook 03, section 2 (all four steps in one function), with padding and one E per head.
    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), E, F as above  ->  (B, H, N, Dv)
    Project k with E and v with F (your project_sequence, with the mask), then exact attention over the k slots.
    Raise ValueError if M exceeds the number of columns of E or F (Linformer has a fixed maximum length).
    You may assume dense E, F (every slot receives some real position). The grader compares with minilin's
    reference for shared and per-head E, two head sizes D, N != M, with and without padding; checks that
    E = F = I gives exact attention; and that a too-long sequence raises ValueError.

    Hint 1 (nudge): after the projection this is ordinary exact attention, with k projected keys and values in
        place of the M keys and values. Which function that you may call already does exact attention?
    Hint 2 (plan): compare M with the column count of E and of F first; project keys and values with Task 3.1
        (mask included); scores are (B, H, N, k); softmax over the slots; times the projected values. No mask is
        needed after the projection: padding is already out of every slot.
    Hint 3 (formula): out = softmax(q (Ẽ K)ᵀ / √D) (F̃ V), with Ẽ K and F̃ V the projected, masked keys and values
        of Task 3.1 and √D the square root of the query's last dimension.
    """
    raise NotImplementedError("Task 3.2")


def projection_matrix_count(sharing, layers, heads):
    """Task 3.3: how many (k, n) projection matrices a Linformer with `layers` layers of `heads` heads stores.

    Revisits notebook 03, section 6.
    sharing: "none" (E_i, F_i per head), "headwise" (one E, one F per layer), "kv" (E = F per layer),
    "layerwise" (a single E for the whole model). Paper sec. 4: a 12-layer 12-head model stores 24 / 12 / 1
    matrices for headwise / kv / layerwise. Return a Python int; raise ValueError for any other `sharing`.
    The grader checks every mode at four (layers, heads) pairs.

    Hint 1 (nudge): count per layer first (how many matrices does one layer keep in each mode?), then decide
        which modes multiply by the number of layers.
    Hint 2 (plan): for each mode ask two questions: over what is one set of projections shared (a head, a
        layer, the whole model), and does that set hold two matrices (E and F) or one (E = F)? Check the mode is
        one of the four before counting.
    Hint 3 (formula): count = (matrices in one set) × (number of sets), where a set holds 2 matrices when E and F
        are separate and 1 when they are the same, and there is one set per head of every layer, per layer, or
        for the whole model; the paper's 12 × 12 numbers above let you test each mode.
    """
    raise NotImplementedError("Task 3.3")


def fan_in_init(k, n, generator, dtype=torch.float64):
    """Task 3.4: a (k, n) projection whose projected keys keep the scale of the keys: entries N(0, 1/n).

    Revisits notebook 03, section 5.
    Slot j of E K sums n keys, Var[(E K)_j] = n · Var[E_ji] · Var[K]; choose Var[E_ji] so the ratio is 1.
    Draw from `generator`. The grader (seed 0, (k, n) = (64, 1024) and (32, 2048)) checks the shape and dtype,
    that variance · n is within 0.05 of 1 and the mean within 5 standard errors of 0, that Var[E K] / Var[K]
    is within 0.1 of 1, and that the same seed gives the same matrix.

    Hint 1 (nudge): Var[(E K)_j] / Var[K] = n · Var[E_ji]. Which variance makes this 1, and how do you scale a
        standard normal to have it?
    Hint 2 (plan): one (k, n) standard-normal draw from the generator, in the requested dtype, times a scalar
        that depends on n only (torch.randn takes a generator and a dtype).
    Hint 3 (formula): E_ij = g_ij / √n with g_ij ~ N(0, 1) drawn from `generator`, so Var[E_ij] = 1/n.
    """
    raise NotImplementedError("Task 3.4")


def linformer_slots(q, k, v, E, F, mask=None):
    """Task 3.5 (extend task): Linformer with structured projections, where a slot may hold no real token.

    Extends notebook 03, sections 6 and 8: section 6 builds structured projections (pooling, convolution), and
    section 8 notes that padding, or a sequence shorter than seq_len, can leave a slot with no real position;
    here you make the forward pass handle it. Same shapes as Task 3.2 (E and F each shared or per head).
    A slot j "holds a token" in sequence b (and head h, for per-head projections) when E or F gives a nonzero
    weight to at least one real position i < M. A slot that holds none is not a token: leave it out of the
    softmax, as exact attention leaves out a padded key. A query left with no slot at all returns zeros
    (never NaN). Raise ValueError for M longer than E or F. Then a selection E = F (row j one-hot at position
    p_j) reproduces exact attention restricted to the selected real keys, and E = F = I exact masked attention.
    The grader checks: dense per-head E with padding against minilin.linformer.linformer_attention; E = F = I
    (seq_len > M, padded) against softmax_attention with the mask; per-head and shared selections against a loop
    over batch and heads that attends to the selected real keys only (one sequence keeps none); and the same
    with NaN stored in every padded key and value. Two head sizes, N != M, batch > 1 and heads > 1 throughout.

    Hint 1 (nudge): Task 3.2 gives a padded slot a key of zeros, so it still gets weight exp(0) in the softmax.
        What did notebook 01 do with a key that must get no weight at all?
    Hint 2 (plan): from the mask, the weight each slot puts on real positions (E's first M columns, their
        absolute values summed over the real positions: (B, k), or (B, H, k) per head); a slot is live when
        that sum is positive for E or for F; project as in Task 3.1; give dead slots a score of minus infinity
        before the softmax; turn the NaN of an all-dead row into zeros.
    Hint 3 (formula): live[b, (h,) j] = (Σ_{i<M, mask[b,i]} |E[(h,) j, i]| > 0) or (the same sum for F > 0);
        out[b, h, t] = Σ_{j live} a_tj (F̃ V)_j with a_tj = exp(s_tj) / Σ_{j' live} exp(s_tj'), s_tj the scaled
        score of query t with projected key j; out = 0 when no slot is live.
    """
    raise NotImplementedError("Task 3.5")


def linformer_matmul_flops(batch, heads, n, m, d, dv, proj_len):
    """Task 3.6 (extend task): the matmul FLOPs of Linformer cross-attention, as a Python int.

    Extends notebook 03, section 3, which counts 8·n·k·d per head for self-attention (N = M, Dv = D). Here
    the queries and keys have different lengths n and m and the values a different width dv: q (B, H, n, d),
    k (B, H, m, d), v (B, H, m, dv), one shared (proj_len, m) E and F, no mask. Count what FlopCounterMode
    counts (2 FLOPs per multiply-add of a matrix product; the softmax is not counted). The grader compares
    with the matrix products of minilin's linformer_attention, counted that way, for three shapes.

    Hint 1 (nudge): list the four matrix products of the forward pass and the shape of each operand.
    Hint 2 (plan): an (a, b) @ (b, c) product costs 2·a·b·c FLOPs; a product that broadcasts over batch and
        heads costs that once per (batch, head) pair; add the four products.
    Hint 3 (formula): per head, projecting the keys costs 2·k·m·d and the values 2·k·m·dv; the scores cost
        2·n·k·d and the weighted sum of projected values 2·n·k·dv; multiply the sum by batch · heads.
    """
    raise NotImplementedError("Task 3.6")
