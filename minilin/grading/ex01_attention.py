"""Checks for exercises/ex01_attention.py (Tasks 1.1-1.7), against references the grader computes.

Each task uses notebook 01's ideas on a case the notebook does not build: grouped-query scores (1.1), a softmax with
an extra zero logit (1.2), a prefix-LM causal mask (1.3), grouped-query attention with that softmax (1.4), the share
of saturated softmax rows at any scale (1.5, the appendix's measure on new cases); 1.6 (decoding with a
key/value cache) and 1.7 (sliding-window causal attention) are extend tasks.
"""
import math

import torch

from minilin.attention import allowed_keys, softmax_attention
from minilin.grading.checks import Chapter, Failure, check, close, describe, expect, expect_close, kind, raises, \
    rand

CHAPTER = Chapter(1, "ex01_attention", "exact softmax attention")
SHAPES = ((2, 3, 6, 4, 3), (3, 2, 9, 9, 2))  # (B, H, N, D, Dv): two head dimensions, two lengths, B > 1, H > 1


def qkv(b, h, n, m, d, dv, seed):
    return rand(b, h, n, d, seed=seed), rand(b, h, m, d, seed=seed + 1), rand(b, h, m, dv, seed=seed + 2)


def grouped(t, heads):
    """(B, G, M, X) -> (B, heads, M, X): key head g serves query heads g * heads/G .. (g + 1) * heads/G - 1."""
    return t.repeat_interleave(heads // t.shape[1], dim=1)


def softmax_one(s, dim=-1):
    """exp(s_j) / (1 + sum exp(s_j')): the reference, in float64 through logsumexp with the zero logit appended."""
    zero = torch.zeros_like(s.narrow(dim, 0, 1))
    return torch.exp(s - torch.logsumexp(torch.cat([s, zero], dim=dim), dim=dim, keepdim=True))


def prefix_mask(n, m, prefix=0):
    """(N, M) bool: bottom-right causal, or key j < prefix (a prefix seen both ways)."""
    return allowed_keys(n, m, causal=True)[0, 0] | (torch.arange(m) < prefix)[None, :]


def grouped_attention(q, k, v, mask=None, causal=False):
    visible = prefix_mask(q.shape[2], k.shape[2]) if causal else torch.ones(q.shape[2], k.shape[2], dtype=torch.bool)
    if mask is not None:
        visible = visible & mask[:, None, None, :]
    s = (q @ grouped(k, q.shape[1]).transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return softmax_one(s.masked_fill(~visible, float("-inf"))) @ grouped(v, q.shape[1])


@CHAPTER.task("1.1", "scaled_scores")
def scaled_scores(f):
    """grouped-query scores q kᵀ / √D, a key head shared by H/G query heads"""
    # several head dimensions, group sizes and lengths: a constant in place of √D, or tiled key heads, cannot pass
    for (h, g, n, m, d), seed in zip([(4, 2, 5, 7, 4), (6, 3, 3, 6, 9), (4, 4, 4, 4, 16), (6, 1, 2, 5, 8)],
                                     (1, 11, 21, 31)):
        q, k = rand(2, h, n, d, seed=seed), rand(2, g, m, d, seed=seed + 1)
        yield close(f(q, k), q @ grouped(k, h).transpose(-2, -1) / d ** 0.5,
                    what=f"q kᵀ / √{d} with H = {h} query heads, G = {g} key heads (query head h uses key head "
                         f"h // {h // g})")


@CHAPTER.task("1.2", "stable_softmax")
def stable_softmax(f):
    """a softmax with an extra zero logit, exp(s_j) / (1 + Σ exp(s_j')), that cannot overflow"""
    x = rand(3, 6, seed=3) * 3.0
    yield close(f(x), softmax_one(x), what="exp(x) / (1 + exp(x).sum(-1)), moderate scores")
    x = rand(3, 6, seed=4) * 1000.0  # exp(1000) overflows: only a stable version survives
    yield close(f(x), softmax_one(x), what="the same on scores up to ±3000 (exp overflows)")
    yield close(f(x, dim=0), softmax_one(x, dim=0), what="the same along dim=0")
    y = rand(4, 5, seed=5) - 800.0  # every logit far below the extra zero: every weight underflows towards 0
    y[0] = float("-inf")  # a fully masked row
    yield close(f(y), softmax_one(y), what="rows far below 0 and an all -inf row: weights 0, not NaN", atol=1e-12)
    s = rand(2, 3, 4, 5, seed=13) * 300.0  # a (B, H, N, M) batch with masked entries, along the last and a middle axis
    s[0, 1, 2] = float("-inf")
    s[1, 2, :, 0] = float("-inf")
    yield close(f(s), softmax_one(s), what="a (2, 3, 4, 5) batch with an all -inf row, along dim=-1")
    yield close(f(s, dim=2), softmax_one(s, dim=2), what="the same batch along dim=2")


@CHAPTER.task("1.3", "causal_mask")
def causal_mask(f):
    """the (N, M) bool prefix-LM mask, aligned bottom-right"""
    yield equal_mask(f(4, 4), prefix_mask(4, 4), "j <= i + (M - N) with no prefix, N = M = 4")
    for n, m, prefix in [(5, 5, 2), (3, 6, 4), (6, 6, 6), (4, 7, 1), (5, 3, 0)]:
        yield equal_mask(f(n, m, prefix), prefix_mask(n, m, prefix),
                         f"j <= i + (M - N) or j < prefix, N={n}, M={m}, prefix={prefix}")


def equal_mask(call, expected, what):
    return close(call, expected, what=what, atol=0.0)


@CHAPTER.task("1.4", "attention")
def attention(f):
    """grouped-query attention with the zero-logit softmax, a key padding mask and a causal flag"""
    q, k, v = rand(2, 4, 5, 4, seed=4), rand(2, 2, 5, 4, seed=5), rand(2, 2, 5, 3, seed=6)
    mask = torch.tensor([[True, True, False, True, True], [False, False, True, True, True]])
    yield close(f(q, k, v), grouped_attention(q, k, v), what="softmax₁(q kᵀ / √D) v, 4 query heads on 2 key heads")
    for causal in (False, True):
        yield close(f(q, k, v, mask=mask, causal=causal), grouped_attention(q, k, v, mask=mask, causal=causal),
                    what=f"the same with a padding mask, causal={causal} (rows with no key: zeros)")
    # fewer or more queries than keys (the causal mask aligns bottom-right), other head counts and head dimension
    for (h, g, n, m), seed in zip(((6, 3, 3, 6), (3, 1, 5, 3)), (7, 8)):
        q2, k2, v2 = rand(2, h, n, 9, seed=seed), rand(2, g, m, 9, seed=seed + 10), rand(2, g, m, 2, seed=seed + 20)
        mask2 = torch.ones(2, m, dtype=torch.bool)
        mask2[1, 0] = False
        yield close(f(q2, k2, v2, mask=mask2, causal=True), grouped_attention(q2, k2, v2, mask=mask2, causal=True),
                    what=f"mask and causal=True, N={n} queries, M={m} keys, H={h}, G={g}, D=9")


@CHAPTER.task("1.5", "saturated_rows")
def saturated_rows(f):
    """per head, the share of query rows whose largest softmax weight reaches a threshold"""
    # head sizes and scales the notebook did not use (μP's 1/D among them), thresholds from 0.075 to 0.99; in every
    # case the expected shares differ between heads, so no constant (zeros included) passes any check. At 1/D the
    # weights sit near 1/M = 0.0625: threshold 0.075 is reached by a third to a half of the rows of each head.
    cases = [((2, 3, 40, 32, 12), None, 0.3), ((2, 2, 50, 64, 48), 1.0, 0.99), ((1, 4, 30, 20, 24), 1.0, 0.9),
             ((2, 2, 40, 16, 96), 1 / 96, 0.075), ((1, 3, 60, 16, 8), 0.7, 0.5)]
    for ((b, h, n, m, d), scale, threshold), seed in zip(cases, (90, 91, 92, 93, 94)):
        q, k = rand(b, h, n, d, seed=seed), rand(b, h, m, d, seed=seed + 1)
        c = 1 / math.sqrt(d) if scale is None else scale
        largest = torch.softmax(c * q @ k.transpose(-2, -1), dim=-1).amax(-1)
        expected = (largest >= threshold).double().mean(-1)
        scale_text = "1/√D" if scale is None else f"{scale:g}"
        call = f(q, k, threshold=threshold) if scale is None else f(q, k, scale=scale, threshold=threshold)
        yield check(call, judge=lambda got, call=call, expected=expected, what=(
            f"the share of rows with largest weight >= {threshold}, per (batch, head), D = {d}, scale {scale_text}"):
            finite_close(got, expected, call, what))


def finite_close(got, expected, call, what):
    """expect_close, and a result with NaN or inf fails whatever the reference holds."""
    if isinstance(got, torch.Tensor) and got.is_floating_point() and not torch.isfinite(got).all():
        raise Failure(f"{describe(call)}\n  returned a tensor with NaN or inf; compared with {what}")
    expect_close(got, expected, call=call, what=what)


# --- 1.6 (extend): decoding with a key/value cache -------------------------------------------------------
def _parts(call, got, index, expected, what):
    """A judge's helper: item `index` of a (out, k_cache, v_cache) result must match `expected`."""
    expect(isinstance(got, (tuple, list)) and len(got) == 3, call,
           f"returned {kind(got)}, expected a tuple (out, k_cache, v_cache)")
    expect_close(got[index], expected, call=call, what=what)


@CHAPTER.task("1.6", "decode_step", extend=True)
def decode_step(f):
    """decoding with a growing key/value cache equals the full causal forward"""
    for (b, h, n, d, dv), seed in zip(SHAPES, (30, 40)):
        q, k, v = qkv(b, h, n, n, d, dv, seed)
        full = softmax_attention(q, k, v, causal=True)  # (B, H, N, Dv)
        # one token at a time: the step at position t gets the cache of positions 0..t-1 (empty at t = 0)
        inputs = [((k[:, :, :t], v[:, :, :t], q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1]), {})
                  for t in range(n)]
        call = f.each(inputs, label=f"decode_step at every position t = 0..{n - 1}, one new token, "
                                    f"(B, H, D, Dv) = {(b, h, d, dv)}")

        def outputs(got, call=call, full=full, n=n):
            expect(isinstance(got, list) and len(got) == n, call, f"returned {kind(got)}, expected {n} results")
            for t, one in enumerate(got):
                _parts(f"{describe(call)}, step t = {t}", one, 0, full[:, :, t:t + 1],
                       f"row {t} of softmax_attention(q, k, v, causal=True) on the whole sequence")
        yield check(call, judge=outputs)

        def caches(got, call=call, k=k, v=v, n=n):
            expect(isinstance(got, list) and len(got) == n, call, f"returned {kind(got)}, expected {n} results")
            for t, one in enumerate(got):
                where = f"{describe(call)}, step t = {t}"
                _parts(where, one, 1, k[:, :, :t + 1], f"the key cache grown by one: keys 0..{t}, (B, H, {t + 1}, D)")
                _parts(where, one, 2, v[:, :, :t + 1], f"the value cache grown by one: values 0..{t}, "
                                                       f"(B, H, {t + 1}, Dv)")
        yield check(call, judge=caches)
        # a chunk of 3 new tokens after a cache of 4: inside the chunk each query sees only its own past
        t, c = 4, 3
        call = f(k[:, :, :t], v[:, :, :t], q[:, :, t:t + c], k[:, :, t:t + c], v[:, :, t:t + c])
        yield check(call, judge=lambda got, call=call, full=full: _parts(
            call, got, 0, full[:, :, t:t + c], f"rows {t}..{t + c - 1} of the full causal forward "
                                               f"(no new query may see a later new key)"))
        # the whole prompt at once from an empty cache (prefill)
        empty_k, empty_v = k[:, :, :0], v[:, :, :0]
        call = f(empty_k, empty_v, q, k, v)
        yield check(call, judge=lambda got, call=call, full=full: _parts(
            call, got, 0, full, "softmax_attention(q, k, v, causal=True): a prefill from an empty cache"))


# --- 1.7 (extend): sliding-window causal attention ---------------------------------------------------------
def window_loops(q, k, v, window, mask=None):
    """Plain loops: query i (position i + M - N) sees the real keys j with position - window < j <= position."""
    b_, h_, n, d = q.shape
    m = k.shape[2]
    out = torch.zeros(b_, h_, n, v.shape[-1], dtype=torch.float64)
    for b in range(b_):
        for h in range(h_):
            for i in range(n):
                pos = i + m - n
                seen = [j for j in range(max(0, pos - window + 1), min(pos, m - 1) + 1)
                        if mask is None or bool(mask[b, j])]
                if not seen:
                    continue
                s = torch.stack([q[b, h, i] @ k[b, h, j] / math.sqrt(d) for j in seen])
                p = torch.softmax(s, dim=0)
                out[b, h, i] = sum(p[x] * v[b, h, j] for x, j in enumerate(seen))
    return out


@CHAPTER.task("1.7", "local_attention", extend=True)
def local_attention(f):
    """causal attention over a sliding window of the most recent keys"""
    for (b, h, n, d, dv), seed in zip(SHAPES, (50, 60)):
        q, k, v = qkv(b, h, n, n, d, dv, seed)
        for window in (1, 3):
            yield close(f(q, k, v, window), window_loops(q, k, v, window),
                        what=f"a loop over the {window} most recent keys (N = M = {n}, D = {d})")
        yield close(f(q, k, v, n + 2), softmax_attention(q, k, v, causal=True),
                    what=f"softmax_attention(q, k, v, causal=True): a window of {n + 2} >= N hides only the future")
    # fewer queries than keys (the queries are the last N positions) with a padding mask; a row that sees only padding
    q, k, v = qkv(2, 3, 3, 7, 5, 2, 70)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 3:6] = False  # batch 1: the last query but one sees keys 3..5, all padding
    yield close(f(q, k, v, 3, mask=mask), window_loops(q, k, v, 3, mask=mask),
                what="a loop over the 3 most recent real keys, N = 3 queries, M = 7 keys, padding (a row of zeros)")
    # perturbation: keys and values outside query i's window must not change its output, inside they must
    q, k, v = qkv(2, 2, 8, 8, 4, 3, 80)
    i, window = 6, 3
    k_out, v_out, k_in, v_in = k.clone(), v.clone(), k.clone(), v.clone()
    for far in (0, 1, 2, 3, 7):  # positions before i - window + 1 = 4, and the future position 7
        k_out[:, :, far] += 5.0
        v_out[:, :, far] -= 7.0
    k_in[:, :, 5] += 5.0
    v_in[:, :, 5] -= 7.0
    calls = (f(q, k, v, window), f(q, k_out, v_out, window), f(q, k_in, v_in, window))

    def depends_on_the_window_only(base, outside, inside):
        for call, got in zip(calls, (base, outside, inside)):
            expect(isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 2, 8, 3), call,
                   f"returned {kind(got)}, expected a tensor of shape (2, 2, 8, 3)")
            expect(bool(torch.isfinite(got).all()), call, "returned NaN or inf: every output here must be finite")
        diff = float((outside[:, :, i] - base[:, :, i]).abs().max())
        if not diff <= 1e-12:
            raise Failure(f"{describe(calls[1])}\n  changing keys and values 0-3 and 7, outside query {i}'s window "
                          f"{i - window + 1}..{i}, changed its output by {diff:.3g} (allowed: 1e-12)")
        moved = float((inside[:, :, i] - base[:, :, i]).abs().max())
        if not moved >= 1e-6:
            raise Failure(f"{describe(calls[2])}\n  changing key and value 5, inside query {i}'s window, changed its "
                          f"output by only {moved:.3g}: the window's keys must count")
    yield check(*calls, judge=depends_on_the_window_only)
    yield raises(f(q, k, v, 0), "ValueError", why="(a window must hold at least one key)")
