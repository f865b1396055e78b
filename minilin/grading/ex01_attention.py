"""Checks for exercises/ex01_attention.py (Tasks 1.1-1.7), against minilin.attention.

Tasks 1.1-1.5 rebuild notebook 01's pieces; 1.6 (decoding with a key/value cache) and 1.7 (sliding-window causal
attention) are extend tasks: the chapter's idea on a case no notebook cell solves.
"""
import math

import torch

from minilin.attention import allowed_keys, attention_matrix, softmax_attention
from minilin.grading.checks import Chapter, Failure, check, close, describe, equal, expect, expect_close, kind, \
    raises, rand

CHAPTER = Chapter(1, "ex01_attention", "exact softmax attention")
SHAPES = ((2, 3, 6, 4, 3), (3, 2, 9, 9, 2))  # (B, H, N, D, Dv): two head dimensions, two lengths, B > 1, H > 1


def qkv(b, h, n, m, d, dv, seed):
    return rand(b, h, n, d, seed=seed), rand(b, h, m, d, seed=seed + 1), rand(b, h, m, dv, seed=seed + 2)


@CHAPTER.task("1.1", "scaled_scores")
def scaled_scores(f):
    """the raw attention scores q kᵀ / √D"""
    # several head dimensions and lengths: a constant in place of √D cannot pass
    for (n, m, d), seed in zip([(5, 7, 4), (3, 6, 9), (4, 4, 16)], (1, 11, 21)):
        q, k = rand(2, 3, n, d, seed=seed), rand(2, 3, m, d, seed=seed + 1)
        yield close(f(q, k), q @ k.transpose(-2, -1) / d ** 0.5, what=f"q @ k.transpose(-2, -1) / √{d}")


@CHAPTER.task("1.2", "stable_softmax")
def stable_softmax(f):
    """a softmax that cannot overflow and maps an all -inf row to zeros"""
    x = rand(3, 6, seed=3) * 1000.0  # exp(1000) overflows: only a stable version survives
    yield close(f(x), torch.softmax(x, dim=-1), what="torch.softmax(x, dim=-1), x up to ±2224")
    yield close(f(x, dim=0), torch.softmax(x, dim=0), what="torch.softmax(x, dim=0)")
    x = x.clone()  # the calls above keep their own x
    x[1] = float("-inf")
    expected = torch.softmax(x, dim=-1).nan_to_num(0.0)
    yield close(f(x), expected, what="torch.softmax with the all -inf row 1 mapped to zeros (not NaN)")
    # a (B, H, N, M) batch of scores with masked entries and one fully masked row, along the last and a middle axis
    s = rand(2, 3, 4, 5, seed=13) * 300.0
    s[0, 1, 2] = float("-inf")
    s[1, 2, :, 0] = float("-inf")
    yield close(f(s), torch.softmax(s, dim=-1).nan_to_num(0.0),
                what="torch.softmax(s, dim=-1) on a (2, 3, 4, 5) batch, the all -inf row [0, 1, 2] as zeros")
    yield close(f(s, dim=2), torch.softmax(s, dim=2).nan_to_num(0.0), what="torch.softmax(s, dim=2), (2, 3, 4, 5)")


@CHAPTER.task("1.3", "causal_mask")
def causal_mask(f):
    """the (N, M) bool causal mask, aligned bottom-right"""
    for n, m in [(4, 4), (3, 6), (1, 5), (5, 3)]:
        yield equal(f(n, m), allowed_keys(n, m, causal=True)[0, 0], what=f"j <= i + (M - N), N={n}, M={m}, bool")


@CHAPTER.task("1.4", "attention")
def attention(f):
    """exact attention with a key padding mask and a causal flag"""
    q, k, v = rand(2, 2, 5, 4, seed=4), rand(2, 2, 5, 4, seed=5), rand(2, 2, 5, 3, seed=6)
    mask = torch.tensor([[True, True, False, True, True], [False, False, True, True, True]])
    for causal in (False, True):
        yield close(f(q, k, v, mask=mask, causal=causal), softmax_attention(q, k, v, mask=mask, causal=causal),
                    what=f"minilin.attention.softmax_attention(q, k, v, mask=mask, causal={causal})")
    yield close(f(q, k, v), attention_matrix(q, k) @ v, what="softmax(q kᵀ / √D) @ v")
    # fewer or more queries than keys (the causal mask aligns bottom-right), another head dimension
    for n, m, seed in ((3, 6, 7), (5, 3, 8)):
        q2, k2, v2 = rand(2, 3, n, 9, seed=seed), rand(2, 3, m, 9, seed=seed + 10), rand(2, 3, m, 2, seed=seed + 20)
        mask2 = torch.ones(2, m, dtype=torch.bool)
        mask2[1, 0] = False
        yield close(f(q2, k2, v2, mask=mask2, causal=True), softmax_attention(q2, k2, v2, mask=mask2, causal=True),
                    what=f"softmax_attention(q, k, v, mask=mask, causal=True) with N={n} queries, M={m} keys, D=9")


@CHAPTER.task("1.5", "score_matrix_bytes")
def score_matrix_bytes(f):
    """bytes of the (batch, heads, n, n) score matrix"""
    yield equal(f(1, 1, 512, torch.float32), 512 * 512 * 4, what="512 x 512 entries of 4 bytes")
    yield equal(f(8, 8, 2048, torch.float16), 8 * 8 * 2048**2 * 2, what="8·8·2048² entries of 2 bytes")
    yield equal(f(2, 3, 10, torch.float64), 2 * 3 * 100 * 8, what="2·3·10² entries of 8 bytes")
    yield equal(f(1, 1, 4, torch.bfloat16), 32, what="16 entries of 2 bytes, as a Python int")
    yield equal(f(4, 16, 32768, torch.float16), 128 * 2**30, what="128 GiB")
    # a dtype outside the usual four: a hard-coded table of float16/bfloat16/float32/float64 cannot pass
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        size = torch.finfo(dtype).bits // 8
        yield equal(f(3, 2, 8, dtype), 3 * 2 * 64 * size,
                    what=f"3·2·8² entries of {size} byte(s) in {str(dtype).removeprefix('torch.')}")


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
        for got in (base, outside, inside):
            expect(isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 2, 8, 3), calls[0],
                   f"returned {kind(got)}, expected a tensor of shape (2, 2, 8, 3)")
        diff = float((outside[:, :, i] - base[:, :, i]).abs().max())
        if diff > 1e-12:
            raise Failure(f"{describe(calls[1])}\n  changing keys and values 0-3 and 7, outside query {i}'s window "
                          f"{i - window + 1}..{i}, changed its output by {diff:.3g} (allowed: 1e-12)")
        moved = float((inside[:, :, i] - base[:, :, i]).abs().max())
        if moved < 1e-6:
            raise Failure(f"{describe(calls[2])}\n  changing key and value 5, inside query {i}'s window, changed its "
                          f"output by only {moved:.3g}: the window's keys must count")
    yield check(*calls, judge=depends_on_the_window_only)
    yield raises(f(q, k, v, 0), "ValueError", why="(a window must hold at least one key)")
