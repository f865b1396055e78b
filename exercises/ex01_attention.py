"""Exercises for notebook 01: exact softmax attention from scratch.

Implement each function, then grade yourself:  python -m minilin grade --chapter 1
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv);
mask (B, M) bool with True = real token (a key padding mask). Do not call minilin.attention here.

Every task uses the chapter's ideas on a case notebook 01 does not build: grouped-query scores (1.1), a softmax
with an extra zero logit (1.2), a prefix-LM mask (1.3), the attention that combines them (1.4), and the share of
saturated softmax rows at any scale (1.5, measured on your own cases). Tasks 1.6 and 1.7 are optional extend tasks:
decoding with a key/value cache, and a sliding-window mask.

Each task has three hints, from a nudge to the formula in words. Read one, try, and read the next only if you are stuck.
"""
import torch


def scaled_scores(q, k):
    """Task 1.1: scaled scores for grouped-query attention, where G key heads serve H query heads.

    q: (B, H, N, D), k: (B, G, M, D) with H a multiple of G  ->  (B, H, N, M), each entry q_i · k_j / √D.
    Query heads come in G consecutive groups of H/G: query head h uses key head h // (H/G) (the layout of Llama's
    repeat_kv and of PyTorch's scaled_dot_product_attention(..., enable_gqa=True)). With G == H it is notebook 01's
    step 2; with G == 1 every query head shares one key head (multi-query attention). Checked with (H, G) = (4, 2),
    (6, 3), (4, 4) and (6, 1), head dimensions 4 to 16, and N != M.

    Hint 1 (nudge): first make a key tensor with one key head per query head; then it is the notebook's scores.
    Hint 2 (plan): the group size is H divided by G; repeat each key head that many times, next to itself, along
        the head axis (not the whole block of G heads over again); then the scaled dot products over D.
    Hint 3 (formula): each score is the dot product of a query of head h with a key of the key head that serves
        h's group (groups are consecutive runs of H/G query heads, counted from 0), divided by the square root of
        the head dimension.
    """
    raise NotImplementedError("Task 1.1")


def stable_softmax(scores, dim=-1):
    """Task 1.2: a softmax with an extra zero logit, exp(s_j) / (1 + Σ_j' exp(s_j')), that cannot overflow.

    scores: any shape, may contain -inf (masked entries)  ->  same shape. Each row sums to less than 1: the missing
    mass goes to an invisible extra key with score 0, so a row can attend to "nothing" (this is the "softmax₁" of
    Evan Miller's "Attention Is Off By One", 2023). Checked on scores up to ±3000, on rows far below 0, on an
    all -inf row (whose weights must be 0, not NaN), and on a (B, H, N, M) batch along the last and a middle axis.

    Hint 1 (nudge): it is a softmax over the row with one more entry, 0. Which constant, subtracted from every
        exponent (that extra 0 included), keeps them all <= 0?
    Hint 2 (plan): one reduction along `dim` with keepdim=True gives the row's largest score; the constant is the
        larger of that and 0; exponentiate the shifted scores; the denominator is the shifted extra entry plus the
        row sum of the shifted exponentials. Check what happens for an all -inf row: no patch should be needed.
    Hint 3 (formula): the shift is the larger of zero and the row's largest score; a weight is the shifted
        exponential of its score, divided by the shifted exponential of the extra zero plus the sum of the row's
        shifted exponentials. The shift cancels between top and bottom, as in the notebook's step 3.
    """
    raise NotImplementedError("Task 1.2")


def causal_mask(n, m, prefix=0):
    """Task 1.3: the (N, M) bool mask of a prefix LM, True where query i may see key j.

    The N queries are the *last* N of the M positions (bottom-right, as in notebook 01, step 6). A query may see
    every key that is not in its future, and also every key of the first `prefix` positions, wherever the query
    is: the prefix (a prompt, an image) is read both ways, the rest causally. prefix=0 is the plain causal mask.
    Example, n = m = 3, prefix = 2:
        [[True, True, False],
         [True, True, False],
         [True, True, True ]]
    Checked with N == M, N < M, N > M (prefix 0: then some rows are all False), and prefixes from 1 to M.

    Hint 1 (nudge): two reasons to see a key: it is not in the query's future, or it lies in the prefix. Combine
        them with a logical "or".
    Hint 2 (plan): a column of query positions (N, 1), counted from M - N, and a row of key positions (1, M);
        compare them for the causal part; compare the key positions with `prefix` for the other; broadcasting
        gives the (N, M) table.
    Hint 3 (formula): a key is visible when its position is at most the query's own position (the query's
        index shifted by the number of keys that come before the first query), or when it is one of the first
        `prefix` positions.
    """
    raise NotImplementedError("Task 1.3")


def attention(q, k, v, mask=None, causal=False):
    """Task 1.4: grouped-query attention with the zero-logit softmax of Task 1.2, a padding mask and a causal flag.

    q: (B, H, N, D), k: (B, G, M, D), v: (B, G, M, Dv) with H a multiple of G, mask: (B, M) bool or None
    ->  (B, H, N, Dv). Query head h uses key and value head h // (H/G) (Task 1.1); the weights are Task 1.2's
    softmax over the visible keys; causal=True is Task 1.3's mask with no prefix. A query with no visible key
    outputs zeros. Checked with (H, G) = (4, 2), (6, 3) and (3, 1), masks, causal and not, N = M, N < M and N > M.

    Hint 1 (nudge): you already have the pieces: Tasks 1.1, 1.2 and 1.3. A hidden key is one whose score is -inf.
    Hint 2 (plan): grouped scores (B, H, N, M); a visibility table: the causal mask (N, M) if asked, combined with
        `&` with the padding mask as (B, 1, 1, M); hidden scores set to -inf; Task 1.2's softmax over the key axis;
        then a weighted sum with the values, repeated per group as the keys were.
    Hint 3 (formula): each output row is the sum of the values of its query head's key head, weighted by Task
        1.2's softmax of the grouped scores, after every score of a padded key or (causal) a future key was set
        to minus infinity.
    """
    raise NotImplementedError("Task 1.4")


def saturated_rows(q, k, scale=None, threshold=0.99):
    """Task 1.5: per batch and head, the share of query rows whose softmax is saturated.

    q: (B, H, N, D), k: (B, H, M, D); scale: the factor on q · k (None: 1/√D); threshold: a float in (0, 1)
    ->  (B, H) float64 tensor: the share of the N rows of softmax(scale · q kᵀ) whose largest weight is >= threshold.
    Notebook 01's appendix found that without the 1/√D scale (q and k at unit variance) a growing share of rows
    saturates as D grows, and that their gradient dies. Measure it on cases the notebook did not use. Before you run it, predict, then check:
    (a) unit-variance q and k, D = 48, M = 64 keys, scale 1: what share of rows reaches 0.99?
    (b) the same with μP's scale 1/D (Yang et al. 2022, arXiv 2203.03466): more or fewer than with 1/√D, and why?
    Checked on random q, k with head sizes 8 to 96, scales 1/√D, 1, 0.7 and 1/D, thresholds 0.075 to 0.99.

    Hint 1 (nudge): a row is saturated when one key takes almost all of its weight; look at each row's largest
        weight.
    Hint 2 (plan): the scaled scores, a softmax over the key axis, the largest weight of each row, compared with
        the threshold; then the share of True over the query axis, as float64.
    Hint 3 (formula): for each batch and head, count the query rows whose largest softmax weight (of the scaled
        scores, over the keys) is at least the threshold, and divide by the number of query rows.
    """
    raise NotImplementedError("Task 1.5")


def decode_step(k_cache, v_cache, q_new, k_new, v_new):
    """Task 1.6 (extend): one decoding step of exact attention with a key/value cache.

    k_cache: (B, H, t, D), v_cache: (B, H, t, Dv) for the t tokens seen so far (t may be 0: an empty cache);
    q_new, k_new: (B, H, T, D), v_new: (B, H, T, Dv) for T >= 1 new tokens, which come right after them.
    Returns (out, k_cache, v_cache): out (B, H, T, Dv), and the two caches grown to t + T positions.
    Fed one token at a time from an empty cache, the outputs must equal the rows of the causal forward over the whole
    sequence; a chunk of T new tokens must give the same rows too. Use the ordinary softmax (rows sum to 1), not
    Task 1.2's.

    Extends notebook 01, section 2, step 6: the markdown there says that N < M is "decoding with a cache of M - N
    earlier keys"; here you write that decoder. Checked at every position of two sequences (N = 6 with D = 4, Dv = 3,
    and N = 9 with D = 9, Dv = 2; B, H > 1), for a chunk of 3 tokens after a cache of 4, and for an empty cache with
    the whole sequence at once; the returned caches must hold keys and values 0..t + T - 1 in order.

    Hint 1 (nudge): the new tokens' queries are the last T of t + T positions. Which of your earlier tasks already
        lines up "the last N queries" against M keys?
    Hint 2 (plan): put the cached and the new keys on one time axis (the cache first), the same for the values;
        attend from the T new queries to all of them with the causal flag on; hand back the output and the two
        longer caches, for the next step to use.
    Hint 3 (formula): the keys are the cached keys followed by the new ones, and the same for the values; new
        query i sits at position t + i, so it sees every cached key and the new keys up to its own position, and
        its output is the softmax-weighted average of the values of those keys.
    """
    raise NotImplementedError("Task 1.6")


def local_attention(q, k, v, window, mask=None):
    """Task 1.7 (extend): causal attention over a sliding window of the `window` most recent keys.

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), window: int >= 1, mask: (B, M) bool or None
    ->  (B, H, N, Dv). Query i sits at position i + (M - N), as in Task 1.3, and may see key j when j is not in its
    future and is one of its `window` most recent positions (its own included), and, with a mask, j is a real token.
    A query with no visible key outputs zeros. A window < 1 raises ValueError. The weights are the ordinary softmax
    (rows sum to 1) over the visible keys, not Task 1.2's.

    Extends notebook 01, section 2 (the padding mask and the causal flag) to local attention, the "sliding
    window" whose rank notebook 02, section 3 measures. Checked against plain loops (windows 1 and 3, D = 4 and 9,
    N = 6 and 9, N < M with padding), against causal attention for a window longer than the sequence, and by
    perturbation: changing keys and values outside a query's window must leave its output unchanged.

    Hint 1 (nudge): a window is the causal mask with a second edge: a key may be neither in the future nor too far
        in the past.
    Hint 2 (plan): a table (N, M) of "query position minus key position" from a column of query positions and a
        row of key positions; keep the entries in 0..window-1; combine with the padding mask as in Task 1.4; then
        a masked softmax whose all-hidden rows give zeros, and the weighted sum.
    Hint 3 (formula): the lag of a key is the query's position minus the key's position; a key is visible when
        its lag is at least zero and less than the window, and it is a real token; the output is the softmax-
        weighted average of the visible keys' values, and zeros for a query with no visible key.
    """
    raise NotImplementedError("Task 1.7")
