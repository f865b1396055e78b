"""Exercises for notebook 01: exact softmax attention from scratch.

Implement each function, then grade yourself:  python -m minilin grade --chapter 1
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv);
mask (B, M) bool with True = real token (a key padding mask). Do not call minilin.attention here.

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch


def scaled_scores(q, k):
    """Task 1.1: the raw attention scores q kᵀ / √D.

    q: (B, H, N, D), k: (B, H, M, D)  ->  (B, H, N, M)

    Hint 1 (nudge): entry (b, h, i, j) is one dot product, divided by a number that depends only on D.
    Hint 2 (plan): the D axis must be summed away and the M axis must end up last; either move k's last two
        axes so a batched matrix product lines up, or name every axis in an einsum string.
    Hint 3 (formula): scores[b, h, i, j] = Σ_d q[b, h, i, d] · k[b, h, j, d] / √D, with D = q.shape[-1].
    """
    raise NotImplementedError("Task 1.1")


def stable_softmax(scores, dim=-1):
    """Task 1.2: softmax along `dim` that cannot overflow, and maps an all -inf row to all zeros.

    scores: any shape, may contain -inf (masked entries)  ->  same shape, each row sums to 1 (or is 0)

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

    Hint 1 (nudge): you already have the pieces: Tasks 1.1, 1.2 and 1.3. A hidden key is one whose score can
        never win, whatever it was.
    Hint 2 (plan): scores (B, H, N, M); a visibility table that broadcasts against them: the causal mask as
        (1, 1, N, M), the padding mask as (B, 1, 1, M), combined with `&`; hidden scores set to -inf; your
        stable softmax over the key axis; then a weighted sum over the key axis with v.
    Hint 3 (formula): P = stable_softmax(scores.masked_fill(~visible, -inf)); out[b, h, i] = Σ_j P[b, h, i, j] v[b, h, j].
    """
    raise NotImplementedError("Task 1.4")


def score_matrix_bytes(batch, heads, n, dtype):
    """Task 1.5: bytes needed to store the (batch, heads, n, n) score matrix in `dtype`.

    dtype: a torch dtype, e.g. torch.float16. Return a Python int.

    Hint 1 (nudge): number of entries times the size of one entry.
    Hint 2 (plan): the size of one entry comes from the dtype itself; do not hard-code a table of dtypes.
        `torch.finfo(dtype)` and `torch.empty((), dtype=dtype)` both know it.
    Hint 3 (formula): batch · heads · n² · (bits per element / 8), e.g. `torch.empty((), dtype=dtype).element_size()`.
    """
    raise NotImplementedError("Task 1.5")
