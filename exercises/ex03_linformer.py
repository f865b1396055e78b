"""Exercises for notebook 03: the Linformer layer.

Implement each function, then grade yourself:  python -m minilin grade --chapter 3
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); mask (B, M) bool with
True = real token. Projections E, F are (k, seq_len) shared by heads, or (H, k, seq_len) one per head, with
seq_len >= M. Do not call minilin.linformer here (minilin.attention.softmax_attention is allowed).
Each task uses the chapter's idea on a case the notebook did not solve; Tasks 3.5 and 3.6 are the extend tasks.
"""
import torch

from minilin.attention import softmax_attention


def mean_pool_projection(k, n, dtype=torch.float64):
    """Task 3.1: a fixed mean-pooling projection E (k, n) for any n >= k, windows as equal as possible.

    Practises notebook 03's structured projections on a case the package refuses: minilin's mean_pool_matrix needs
    n divisible by k. Here the n positions are cut into k contiguous windows in order, the first (n mod k) windows
    one position longer than the others (as torch.tensor_split cuts); row j averages window j (weight 1/size on its
    positions, 0 elsewhere). Return a (k, n) tensor of `dtype`; raise ValueError unless 1 <= k <= n. The grader
    checks several (k, n), divisible and not, against a loop that builds the windows one by one.

    Hint 1 (nudge): with n = 10 and k = 4 the window sizes are 3, 3, 2, 2. Where does each window start?
    Hint 2 (plan): check k; start from a (k, n) zero matrix; split the positions 0..n-1 into the k windows; write
        1/size into row j on the positions of window j.
    Hint 3 (formula): in words: a window is one position longer than the whole-number quotient of n by k exactly
        when its index is below the remainder; each window starts where the one before it ended; a row holds one
        over its window's size on that window and zero elsewhere, so every row sums to one.
    """
    raise NotImplementedError("Task 3.1")


def linformer_forward(q, k, v, E, F, mask=None):
    """Task 3.2: Linformer attention softmax(q (E k)ᵀ / √D) (F v) (paper eq. 7, arXiv 2006.04768).

    Extends notebook 03, section 2 (all four steps in one function) to padding, N != M and one E per head.
    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), E, F as above  ->  (B, H, N, Dv)
    Project k with E and v with F along the sequence axis, using only the first M columns of E and F (a shorter
    sequence) and zeroing padded keys and values first (mask False: they feed no slot, even if they hold NaN), then
    exact attention over the k slots.
    Raise ValueError if M exceeds the number of columns of E or F (Linformer has a fixed maximum length).
    You may assume dense E, F (every slot receives some real position). The grader compares with minilin's
    reference for shared and per-head E, two head sizes D, N != M, with and without padding; checks that
    E = F = I gives exact attention; and that a too-long sequence raises ValueError.

    Hint 1 (nudge): after the projection this is ordinary exact attention, with k projected keys and values in
        place of the M keys and values. Which function that you may call already does exact attention?
    Hint 2 (plan): compare M with the column count of E and of F first; replace padded keys and values by zero
        (a fill, not a product: 0 times NaN is NaN); keep the first M columns of E and F; a (k, M) or (H, k, M)
        matrix times (B, H, M, D) broadcasts; then exact attention over the k projected keys and values. No mask is
        needed after the projection: padding is already out of every slot.
    Hint 3 (formula): in words: each projected key is a weighted sum of the (zero-padded) keys, with the weights of
        one row of E's first M columns; each query scores every projected key by a dot product divided by the
        square root of the head size; a softmax over the k slots turns the scores into weights that mix the
        projected values.
    """
    raise NotImplementedError("Task 3.2")


def slot_probe_r2(x, coeffs, k):
    """Task 3.3: how much of a signal's coefficients k linear slots of the input can carry (R^2 of a probe).

    Practises notebook 03's probe of the slots (appendix: what do the slots carry?) on signals the notebook did not
    use. This measures the best *linear* slots: a bound for slots that are linear in the input, not a law for a
    trained Linformer (the notebook's trained k = 4 block, with its nonlinear LayerNorm, ends above it).
    x: (B, n) noisy signals, coeffs: (B, c) the coefficients of their clean parts, k: int, 1 <= k <= n.
    The k slots of a signal are its coordinates along the top-k principal directions of x (the right singular
    vectors of x after subtracting each position's mean over the B signals, largest singular values first): the k
    linear summaries of the input that keep the most of its variance. Fit least squares with a bias from the (B, k)
    slots to coeffs and return, as a Python float, R^2 = 1 - (sum of squared residuals) / (sum of squared deviations
    of coeffs from their mean over the batch), on the same B signals. The grader draws sums of 2, 3 and 6 sinusoids
    (not the notebook's 4) at two lengths and compares with its own probe for several k.

    Hint 1 (nudge): a Linformer's F turns a length-n signal into k numbers Fx. Which k numbers keep the most of
        x's variance, and how do you score how well they predict the coefficients?
    Hint 2 (plan): centre x over the batch; singular value decomposition; keep the first k right singular
        vectors; project the centred x on them; append a column of ones; least squares to coeffs; compare the
        residual with the spread of coeffs.
    Hint 3 (formula): in words: the slots of a signal are the dot products of its centred version with the first
        k right singular vectors; the fit is ordinary least squares from those k numbers and a constant to the
        coefficients; R^2 is one minus the summed squared residual (over every signal and coefficient) divided
        by the summed squared deviation of the coefficients from their batch means.
    """
    raise NotImplementedError("Task 3.3")


def slots_needed(x, coeffs, share):
    """Task 3.4: the smallest k whose slots carry a given share of the coefficients (predict it, then measure).

    How many linear slots does a signal need? Here: the smallest k (a Python int, 1 <= k <= n) for which
    slot_probe_r2(x, coeffs, k) >= share, or n + 1 when no k reaches it. Before you run it, predict the answer for
    a sum of f sinusoids (2f coefficients) at share 0.9. It is the count for *linear* slots only: a trained layer
    can learn a nonlinear encoding that carries more in fewer slots (notebook 03's appendix). The
    grader compares with its own measurement on sums of 2, 3 and 5 sinusoids, at two shares. It calls your
    slot_probe_r2, so Task 3.3 must pass first.

    Hint 1 (nudge): can R^2 fall when one more slot is added? (A fit with one more slot may always ignore it.)
    Hint 2 (plan): predict first, from the number of coefficients; then measure R^2 at a few k with your Task 3.3
        and see where it crosses the share; decide what the function returns when it never does.
    Hint 3 (formula): in words: because R^2 never decreases with k, the k that reach the share form a run that
        ends at n; the answer is where that run begins, and the value the docstring names when the run is empty.
    """
    raise NotImplementedError("Task 3.4")


def causal_window_linformer(q, k, v, window):
    """Task 3.5 (extend task): a causal Linformer: pooled slots of past windows, exact attention in the current one.

    Extends notebook 03, section 5 and its appendix on a slot mask: with mean-pooling slots, a mask that keeps only
    the completed windows is causal, but most queries lose their own window. Here each query gets it back, exactly.
    q, k: (B, H, n, D), v: (B, H, n, Dv), window: int  ->  (B, H, n, Dv); self-attention (queries and keys at the
    same n positions), no mask. Cut the positions into windows of `window` consecutive positions from position 0
    (the last one shorter when window does not divide n). Query t, in window w, attends in ONE softmax over
      - one slot per completed window u < w: the mean of window u's keys as its key, the mean of its values as
        its value;
      - every position s of its own window with s <= t: the key and value at s.
    Every score is a dot product divided by √D. Raise ValueError unless window >= 1. Output t must not depend on
    any input after t. The grader checks window = 1 and window >= n (both are exact causal attention), windows
    that divide n and that do not, D != Dv, against a loop over the queries, and that outputs 0..t stay put when
    every input after t is replaced.

    Hint 1 (nudge): the appendix's slot mask keeps the past windows; what did notebook 01 use to let a query see
        the keys up to itself and none after?
    Hint 2 (plan): handle one window of queries at a time: build its slots from the windows before it, put them
        beside the window's own keys and values, score its queries against both, hide the own-window keys that
        come after each query, one softmax, then mix the matching values.
    Hint 3 (formula): in words: output t is a weighted mean of the mean values of the completed windows and the
        values of its own window up to t, each weight proportional to the exponential of query t's scaled dot
        product with the matching key (a window's mean key, or the key itself).
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
    Hint 3 (formula): in words: each product costs twice the product of its three sizes (the left factor's rows,
        the summed dimension, the right factor's columns); write both operands' shapes for each of the four
        before you multiply, since they differ in which of n, m, proj_len, d and dv they involve; each repeats
        once per batch element and head.
    """
    raise NotImplementedError("Task 3.6")
