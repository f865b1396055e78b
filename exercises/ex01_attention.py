"""Exercises for notebook 01: exact softmax attention from scratch.

Implement each function, then grade yourself:  python -m minilin grade --chapter 1
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv);
mask (B, M) bool with True = real token (a key padding mask). Do not call minilin.attention here.

Tasks 1.1-1.5 revisit what notebook 01 builds; Tasks 1.6 and 1.7 are extend tasks: they use the chapter's idea on
a case the notebook does not solve (decoding with a key/value cache, a sliding-window mask).

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch


def scaled_scores(q, k):
    """Task 1.1: the raw attention scores q kᵀ / √D.

    q: (B, H, N, D), k: (B, H, M, D)  ->  (B, H, N, M). Revisits notebook 01, section 2, steps 1 and 2.
    Checked with head dimensions 4, 9 and 16 and N != M.

    Hint 1 (nudge): entry (b, h, i, j) is one dot product, divided by a number that depends only on D.
    Hint 2 (plan): the D axis must be summed away and the M axis must end up last; either move k's last two
        axes so a batched matrix product lines up, or name every axis in an einsum string.
    Hint 3 (formula): scores[b, h, i, j] = Σ_d q[b, h, i, d] · k[b, h, j, d] / √D, with D the size of the last axis.
    """
    raise NotImplementedError("Task 1.1")


def stable_softmax(scores, dim=-1):
    """Task 1.2: softmax along `dim` that cannot overflow, and maps an all -inf row to all zeros.

    scores: any shape, may contain -inf (masked entries)  ->  same shape, each row sums to 1 (or is 0)
    Revisits notebook 01, section 2, steps 3 and 5. Checked on scores up to ±2224 and on a (B, H, N, M) batch, along
    the last axis and along another one.

    Hint 1 (nudge): softmax does not change when you subtract the same number from every entry of a row. Which
        number keeps every exponent <= 0? And what goes wrong with that number when the whole row is -inf?
    Hint 2 (plan): one reduction along `dim` with keepdim=True gives a per-row constant; patch it where it is not
        finite; exponentiate; reduce again for the normaliser and patch the rows whose normaliser is 0.
    Hint 3 (formula): c = max of the row (0 if that max is -inf); e = exp(scores - c);
        result = e / s, where s = the row sum of e, replaced by 1 where it is 0.
    """
    raise NotImplementedError("Task 1.2")


def causal_mask(n, m):
    """Task 1.3: the (N, M) bool causal mask, True where query i may see key j.

    The N queries are the *last* N of the M positions ("bottom-right" alignment, as when decoding with a cache
    of M - N earlier keys); with N == M it is the usual lower triangle. Example, n=2, m=4:
        [[True, True, True, False],
         [True, True, True, True ]]
    Revisits notebook 01, section 2, step 6. Checked with N == M, N < M and N > M (then some rows are all False).

    Hint 1 (nudge): query i sits at position i + (M - N) in the full sequence. Which keys are not in its future?
    Hint 2 (plan): build a column of query indices (N, 1) and a row of key indices (1, M) and compare them:
        broadcasting turns one comparison into the whole (N, M) table.
    Hint 3 (formula): mask[i, j] = (j <= i + (M - N)).
    """
    raise NotImplementedError("Task 1.3")


def attention(q, k, v, mask=None, causal=False):
    """Task 1.4: exact attention softmax(q kᵀ / √D) v with a key padding mask and a causal flag.

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), mask: (B, M) bool or None  ->  (B, H, N, Dv)
    A query with no visible key (all padded, or all in its future) must output zeros, never NaN.
    Revisits notebook 01, section 2 ("Putting the six steps together"). Checked with a mask (causal and not) and
    with neither at N = M = 5, D = 4; then causal with a mask at N < M and at N > M with D = 9.

    Hint 1 (nudge): you already have the pieces: Tasks 1.1, 1.2 and 1.3. A hidden key is one whose score can
        never win, whatever it was.
    Hint 2 (plan): scores (B, H, N, M); a visibility table that broadcasts against them: the causal mask as
        (1, 1, N, M), the padding mask as (B, 1, 1, M), combined with `&`; hidden scores set to -inf; your
        stable softmax over the key axis; then a weighted sum over the key axis with v.
    Hint 3 (formula): visible[b, i, j] = (key j is real in sequence b) and (not causal, or j <= i + (M - N));
        P[b, h, i, ·] = your stable softmax over j of (scores[b, h, i, j] where visible, -∞ elsewhere);
        out[b, h, i] = Σ_j P[b, h, i, j] v[b, h, j].
    """
    raise NotImplementedError("Task 1.4")


def score_matrix_bytes(batch, heads, n, dtype):
    """Task 1.5: bytes needed to store the (batch, heads, n, n) score matrix in `dtype`.

    dtype: a torch dtype, e.g. torch.float16. Return a Python int.
    Revisits notebook 01, section 5. Checked with float16, bfloat16, float32, float64 and floating dtypes
    beyond those four, and several sizes.

    Hint 1 (nudge): number of entries times the size of one entry.
    Hint 2 (plan): the size of one entry comes from the dtype itself; do not hard-code a table of dtypes.
        torch.finfo describes a floating dtype (its bits among the rest), and any tensor of that dtype knows the
        size of its elements; the count of entries comes from the four arguments alone.
    Hint 3 (formula): bytes = batch · heads · n² · (bytes of one element), where one element takes the dtype's
        number of bits divided by 8 bytes.
    """
    raise NotImplementedError("Task 1.5")


def decode_step(k_cache, v_cache, q_new, k_new, v_new):
    """Task 1.6 (extend): one decoding step of exact attention with a key/value cache.

    k_cache: (B, H, t, D), v_cache: (B, H, t, Dv) for the t tokens seen so far (t may be 0: an empty cache);
    q_new, k_new: (B, H, T, D), v_new: (B, H, T, Dv) for T >= 1 new tokens, which come right after them.
    Returns (out, k_cache, v_cache): out (B, H, T, Dv), and the two caches grown to t + T positions.
    Fed one token at a time from an empty cache, the outputs must equal the rows of the causal forward over the whole
    sequence; a chunk of T new tokens must give the same rows too.

    Extends notebook 01, section 2, step 6: the markdown there says that N < M is "decoding with a cache of M - N
    earlier keys"; here you write that decoder. Checked at every position of two sequences (N = 6 with D = 4, Dv = 3,
    and N = 9 with D = 9, Dv = 2; B, H > 1), for a chunk of 3 tokens after a cache of 4, and for an empty cache with
    the whole sequence at once; the returned caches must hold keys and values 0..t + T - 1 in order.

    Hint 1 (nudge): the new tokens' queries are the last T of t + T positions. Which of your earlier tasks already
        lines up "the last N queries" against M keys?
    Hint 2 (plan): put the cached and the new keys on one time axis (the cache first), the same for the values;
        attend from the T new queries to all of them with the causal flag on; hand back the output and the two
        longer caches, for the next step to use.
    Hint 3 (formula): K' = [K_cache; K_new] and V' = [V_cache; V_new] along the time axis (length M = t + T);
        out[b, h, i] = Σ_{j <= t + i} softmax_j(q_new[b, h, i] · K'[b, h, j] / √D) V'[b, h, j], i = 0..T-1.
    """
    raise NotImplementedError("Task 1.6")


def local_attention(q, k, v, window, mask=None):
    """Task 1.7 (extend): causal attention over a sliding window of the `window` most recent keys.

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), window: int >= 1, mask: (B, M) bool or None
    ->  (B, H, N, Dv). Query i sits at position i + (M - N), as in Task 1.3, and may see key j when j is not in its
    future and is one of its `window` most recent positions (its own included), and, with a mask, j is a real token.
    A query with no visible key outputs zeros. A window < 1 raises ValueError.

    Extends notebook 01, section 2 (the padding mask and the causal flag) to local attention, the "sliding
    window" that notebook 02, section 2(b) measures. Checked against plain loops (windows 1 and 3, D = 4 and 9,
    N = 6 and 9, N < M with padding), against causal attention for a window longer than the sequence, and by
    perturbation: changing keys and values outside a query's window must leave its output unchanged.

    Hint 1 (nudge): a window is the causal mask with a second edge: a key may be neither in the future nor too far
        in the past.
    Hint 2 (plan): a table (N, M) of "query position minus key position" from a column of query positions and a
        row of key positions; keep the entries in 0..window-1; combine with the padding mask as in Task 1.4; then
        the masked, stable softmax and the weighted sum.
    Hint 3 (formula): lag[i, j] = i + (M - N) - j; visible[b, i, j] = (0 <= lag[i, j] < window) and (key j is real);
        out[b, h, i] = Σ_j softmax over visible j of (q_i · k_j / √D) · v_j, zeros where no j is visible.
    """
    raise NotImplementedError("Task 1.7")
