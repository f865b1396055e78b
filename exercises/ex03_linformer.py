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
    Hint 3 (formula): E[j, s] = 1 / size_j when position s lies in window j, else 0, where size_j is the ceiling of
        n/k for the first (n mod k) windows and the floor of n/k for the rest, and the windows follow each other
        without gaps from position 0.
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
    Hint 3 (formula): out = softmax(q (Ẽ K̃)ᵀ / √D) (F̃ Ṽ), with Ẽ, F̃ the first M columns of E, F, K̃ and Ṽ the keys
        and values with padded rows set to zero, and √D the square root of the query's last dimension.
    """
    raise NotImplementedError("Task 3.2")


def slot_probe_r2(x, coeffs, k):
    """Task 3.3: how much of a signal's coefficients k linear slots of the input can carry (R^2 of a probe).

    Practises notebook 03, section 6 (why too few slots fall behind) on signals the notebook did not use.
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
    Hint 3 (formula): with X the centred signals and V_k the first k right singular vectors, S = X V_k (B, k);
        W minimises the squared error of [S, 1] W against the coefficients C; R^2 = 1 - |[S, 1] W - C|^2 / |C - mean(C)|^2.
    """
    raise NotImplementedError("Task 3.3")


def slots_needed(x, coeffs, share):
    """Task 3.4: the smallest k whose slots carry a given share of the coefficients (predict it, then measure).

    Notebook 03, section 6 found that a Linformer's k sets how much of the signal its slots can pass on. Here: the
    smallest k (a Python int, 1 <= k <= n) for which slot_probe_r2(x, coeffs, k) >= share, or n + 1 when no k
    reaches it. Before you run it, predict the answer for a sum of f sinusoids (2f coefficients) at share 0.9. The
    grader compares with its own measurement on sums of 2, 3 and 5 sinusoids, at two shares. It calls your
    slot_probe_r2, so Task 3.3 must pass first.

    Hint 1 (nudge): R^2 can only grow when k grows (more slots, a larger space of fits). So where do you start?
    Hint 2 (plan): try k = 1, 2, ... in order with your Task 3.3 and return the first k that reaches the share.
    Hint 3 (formula): the answer is min { k : R^2(k) >= share }, found by trying k in increasing order, and n + 1
        when even k = n falls short.
    """
    raise NotImplementedError("Task 3.4")


def linformer_slots(q, k, v, E, F, mask=None):
    """Task 3.5 (extend task): Linformer with structured projections, where a slot may hold no real token.

    Extends notebook 03's appendices on structured projections (pooling, convolution) and padding: padding, or a
    sequence shorter than seq_len, can leave a slot with no real position; here you make the forward pass handle it. Same shapes as Task 3.2 (E and F each shared or per head).
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
        that sum is positive for E or for F; project as in Task 3.2; give dead slots a score of minus infinity
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
