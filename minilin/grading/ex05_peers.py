"""Checks for exercises/ex05_peers.py (Tasks 5.1-5.4, 5.6, 5.8, 5.10), against minilin.efficient, minilin.linear and
the peers (5.8: linear-attention-transformer's clamp, measured by bisection on its output; 5.10: hidden layers,
minilin.probes.SuspectAttention, drawn anew each run)."""
import copy
import importlib
import math

import torch

from minilin.grading.checks import (CannotGrade, Chapter, captured, check, close, expect, expect_close,
                                    expect_within, gen, kind, rand)
from minilin.grading.ex04_performer import no_future_leak
from minilin.probes import SuspectAttention

CHAPTER = Chapter(5, "ex05_peers", "efficient attention, weight transplants")
MASK = torch.tensor([[True, False, True, True, True, False, True], [False] * 7])


def peer(module):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise CannotGrade(f"{module} is not installed (pip install -e \".[course]\"): {err}") from None


def no_quadratic_product(call, n, m, out_shape):
    """A step: among the matrix products the call forms, none is (n x m) or (m x n), and no tensor that any
    operation produces holds B·H·n·m elements or more (a score matrix built by broadcasting): no score matrix.
    Callers pick n, m >= 4·D·Dv, so that a linear-cost (N or M, D, Dv) tensor of outer products stays below."""
    def judge(got):
        products = got.get("products") if isinstance(got, dict) else None
        expect(isinstance(products, list), call, f"returned {kind(got)}; expected the function's output")
        expect(tuple(got.get("shape", ())) == out_shape, call, f"output shape {got.get('shape')}, expected {out_shape}")
        square = sorted({p for p in products if tuple(p) in ((n, m), (m, n))})
        expect(not square, call, f"formed a matrix product of shape {square[:1]}: an (N x M) = ({n} x {m}) score "
                                 f"matrix; sum over the keys first. Products recorded: {products[:8]}")
        full = out_shape[0] * out_shape[1] * n * m
        expect(got.get("largest", 0) < full, call, f"an intermediate tensor of {got.get('largest')} elements, as "
               f"many as the B·H·N·M = {full} scores: an (N x M) = ({n} x {m}) score matrix per (batch, head), "
               f"built without a matrix product (broadcasting counts too); sum over the keys first")
    return check(call, judge=judge)


@CHAPTER.task("5.1", "efficient_attention")
def efficient_attention(f):
    """Shen et al.'s efficient attention with a padding mask"""
    from minilin.efficient import efficient_attention as reference
    q, k, v = rand(2, 3, 5, 4, seed=1), rand(2, 3, 7, 4, seed=2), rand(2, 3, 7, 3, seed=3)
    yield close(f(q, k, v), reference(q, k, v), what="minilin.efficient.efficient_attention(q, k, v), D = 4")
    q2, k2, v2 = rand(3, 2, 6, 6, seed=11), rand(3, 2, 4, 6, seed=12), rand(3, 2, 4, 2, seed=13)
    yield close(f(q2, k2, v2), reference(q2, k2, v2), what="the reference with D = 6, N = 6 > M = 4, Dv = 2")
    yield close(f(q, k, v, mask=MASK), reference(q, k, v, mask=MASK),
                what="the reference with a padding mask; sequence 2 has no real key: zeros")
    yield close(f(q, k * 500.0, v), reference(q, k * 500.0, v),
                what="the reference with keys x 500 (stability: up to 1095, a plain exp overflows past 709)")
    q3, k3, v3 = rand(2, 2, 48, 4, seed=14), rand(2, 2, 64, 4, seed=15), rand(2, 2, 64, 3, seed=16)
    yield no_quadratic_product(captured(f(q3, k3, v3), "matmul_shapes"), 48, 64, (2, 2, 48, 3))


@CHAPTER.task("5.2", "causal_efficient_attention")
def causal_efficient_attention(f):
    """the causal variant by prefix sums"""
    from minilin.efficient import efficient_attention as reference
    q, k, v = rand(2, 2, 8, 4, seed=4), rand(2, 2, 8, 4, seed=5), rand(2, 2, 8, 3, seed=6)
    yield close(f(q, k, v), reference(q, k, v, causal=True),
                what="minilin.efficient.efficient_attention(q, k, v, causal=True)")
    q2, k2, v2 = rand(3, 3, 11, 6, seed=21), rand(3, 3, 11, 6, seed=22), rand(3, 3, 11, 2, seed=23)
    yield close(f(q2, k2, v2), reference(q2, k2, v2, causal=True), what="the reference with N = 11, D = 6, Dv = 2")
    yield no_future_leak(f, lambda x: (x, x, x), rand(1, 2, 8, 4, seed=7), "q, k and v")
    q4, k4, v4 = rand(3, 3, 48, 4, seed=24), rand(3, 3, 48, 4, seed=25), rand(3, 3, 48, 2, seed=26)
    yield no_quadratic_product(captured(f(q4, k4, v4), "matmul_shapes"), 48, 48, (3, 3, 48, 2))


def _seeded(seed, build):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build()


def load_state(call, module, got):
    """A fresh copy of the grader's `module` holding the state the learner's function left in it."""
    expect(isinstance(got, dict) and got.get("returned_input") is True, call,
           "must return the module it was given (modified in place), not a new one")
    filled = copy.deepcopy(module)
    try:
        filled.load_state_dict(got["state"], strict=True)
    except (RuntimeError, TypeError, KeyError) as err:
        expect(False, call, f"the module's weights cannot be loaded back: {str(err).splitlines()[0]}")
    return filled


@CHAPTER.task("5.3", "transplant_into_lat")
def transplant_into_lat(f):
    """our EfficientSelfAttention's weights into linear-attention-transformer, non-causal and causal"""
    from minilin.efficient import EfficientSelfAttention
    lat_module = peer("linear_attention_transformer.linear_attention_transformer")
    # D = 8, then D = 5 (dim_head != dim / heads); each non-causal and causal. At these inputs LAT's causal
    # denominator stays above 0.3, far from its 1e-3 clamp (tests/exercises checks it), so the constant cancels.
    for dim, heads, dim_head, seed in ((24, 3, 8, 0), (20, 2, 5, 3)):
        for causal in (False, True):
            ours = _seeded(seed, lambda: EfficientSelfAttention(dim, heads=heads, dim_head=dim_head).double())
            lat = _seeded(seed + 1, lambda: lat_module.SelfAttention(dim, heads, causal=causal,
                                                                     dim_head=dim_head).double())
            call = captured(f(ours, lat, causal=causal), "module:1")  # send back lat's state_dict
            x = rand(2, 10, dim, seed=8 + seed)
            mask = torch.ones(2, 10, dtype=torch.bool)
            mask[0, 7:] = False

            def judge(got, call=call, ours=ours, lat=lat, x=x, mask=mask, dim_head=dim_head, causal=causal):
                filled = load_state(call, lat, got)
                kind_ = f"head dim D = {dim_head}, causal={causal}"
                with torch.no_grad():
                    expect_close(filled(x), ours(x, causal=causal), call=call,
                                 what=f"ours(x, causal={causal}), with lat given the returned weights ({kind_})")
                    expect_close(filled(x, input_mask=mask), ours(x, mask=mask, causal=causal), call=call,
                                 what=f"ours(x, mask=mask, causal={causal}) (padding mask, {kind_})")
            yield check(call, judge=judge)


@CHAPTER.task("5.4", "linformer_into_ours")
def linformer_into_ours(f):
    """a `linformer` LinformerSelfAttention's weights into ours"""
    from minilin.linformer import LinformerSelfAttention
    linformer = peer("linformer")
    for dim, heads, seq_len, k, lengths in ((24, 3, 16, 4, (16, 11)), (30, 5, 12, 6, (12, 7))):
        theirs = _seeded(1, lambda: linformer.LinformerSelfAttention(dim=dim, seq_len=seq_len, k=k,
                                                                      heads=heads).double())
        ours = _seeded(2, lambda: LinformerSelfAttention(dim, heads=heads, seq_len=seq_len, proj_len=k,
                                                         sharing="headwise").double())
        call = captured(f(theirs, ours), "module:1")

        def judge(got, call=call, theirs=theirs, ours=ours, dim=dim, lengths=lengths, seq_len=seq_len, k=k):
            filled = load_state(call, ours, got)
            with torch.no_grad():
                for n in lengths:  # shorter inputs use the first n columns of E, F on both sides
                    x = rand(2, n, dim, seed=9 + n)
                    expect_close(filled(x), theirs(x), call=call,
                                 what=f"theirs(x) for x (2, {n}, {dim}), seq_len {seq_len}, k {k}")
        yield check(call, judge=judge)


@CHAPTER.task("5.6", "chunked_causal_linear_attention", extend=True)
def chunked_causal_linear_attention(f):
    """causal elu+1 linear attention in chunks, with a key padding mask"""
    from minilin.linear import elu_plus_one, linear_attention_reference

    def reference(q, k, v, mask=None):
        return linear_attention_reference(q, k, v, feature_map=elu_plus_one, mask=mask, causal=True)

    q, k, v = rand(2, 3, 10, 4, seed=31), rand(2, 3, 10, 4, seed=32), rand(2, 3, 10, 3, seed=33)
    for chunk in (1, 3, 4, 10, 16):
        yield close(f(q, k, v, chunk), reference(q, k, v),
                    what=f"minilin.linear.linear_attention_reference(elu+1, causal) with chunk_size={chunk}, N = 10")
    q2, k2, v2 = rand(3, 2, 13, 6, seed=34), rand(3, 2, 13, 6, seed=35), rand(3, 2, 13, 5, seed=36)
    yield close(f(q2, k2, v2, 5), reference(q2, k2, v2), what="the reference with N = 13, D = 6, Dv = 5, chunks of 5")
    mask = torch.ones(3, 13, dtype=torch.bool)
    mask[0, 9:] = False  # right padding
    mask[1, :4] = False  # left padding: the first queries see no real key (zeros)
    mask[2, ::3] = False
    yield close(f(q2, k2, v2, 4, mask=mask), reference(q2, k2, v2, mask=mask),
                what="the reference with a key padding mask (right, left and scattered padding), chunks of 4")
    yield no_future_leak(f, lambda x: (x, x, x), rand(2, 2, 9, 4, seed=37), "q, k and v", chunk_size=4)
    q3, k3, v3 = rand(2, 2, 48, 4, seed=38), rand(2, 2, 48, 4, seed=39), rand(2, 2, 48, 3, seed=40)
    yield no_quadratic_product(captured(f(q3, k3, v3, 4), "matmul_shapes"), 48, 48, (2, 2, 48, 3))


def lat_clamp_onset(q, k, bucket_size):
    """The shift s below which LAT's causal_linear_attn(q, k + s, 1) leaves the idealised kernel, measured.

    With values all 1 the idealised output is exactly 1 for a query that sees a key (0 for one that sees none), so
    any departure is LAT's clamp. Bisection on s (the departure grows as s falls) to 1e-12; the onset it finds lies
    within 1e-9 of the exact one (a departure is counted from 1e-9 on)."""
    lat = peer("linear_attention_transformer.linear_attention_transformer")
    n = q.shape[2]
    position = torch.arange(n)
    sees = (position if bucket_size == 1 else (position // bucket_size) * bucket_size - 1) >= 0
    ideal = sees.to(q.dtype)[:, None]  # (N, 1)

    def departs(s):
        with torch.no_grad():
            out = lat.causal_linear_attn(q, k + s, torch.ones_like(q), bucket_size=bucket_size)
        return bool(((out - ideal).abs() > 1e-9).any())

    hi, step = 0.0, 1.0
    while departs(hi):
        hi, step = hi + step, 2 * step
    lo, step = hi - 1.0, 1.0
    while not departs(lo):
        lo, step = lo - step, 2 * step
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if departs(mid) else (lo, mid)
    return hi


@CHAPTER.task("5.8", "clamp_onset", extend=True)
def clamp_onset(f):
    """predict, then measure: the key shift below which LAT's causal clamp changes its output"""
    # (B, H, N, D, bucket_size, query scale, key offset, seed); the onset is measured on LAT itself (float64)
    cases = ((2, 3, 8, 4, 1, 1.0, 0.0, 60), (2, 2, 12, 16, 1, 2.0, -4.0, 62), (2, 2, 12, 8, 4, 1.0, 0.0, 64),
             (1, 2, 16, 64, 2, 0.5, -9.0, 66))
    for B, H, N, D, bucket, q_scale, offset, seed in cases:
        q, k = rand(B, H, N, D, seed=seed, scale=q_scale), rand(B, H, N, D, seed=seed + 1) + offset
        what = f"the onset measured on LAT's causal_linear_attn (D = {D}, N = {N}, bucket_size = {bucket}"
        if D == 16:  # query 0 and key 0 share a large feature: the smallest denominator is at a later position
            q[..., 0, 0] += 6.0
            k[..., 0, 0] += 6.0
            what += "; query 0 and key 0 share a large feature"
        elif offset < 0:
            what += "; keys low: the clamp already acts at s = 0"
        yield close(f(q, k, bucket_size=bucket), lat_clamp_onset(q, k, bucket), atol=1e-6, what=what + ")")


def past_changes_reference(layer, x, factors=(10.0, -10.0)):
    """The grader's own reading: for each split t0, the largest |change| of the outputs before t0 when the inputs
    from t0 on are multiplied by each of `factors` (large, both signs: enough to move a maximum over all positions)."""
    n = x.shape[1]
    out = torch.zeros(n, dtype=torch.float64)
    with torch.no_grad():
        base = layer(x)
        for t0 in range(1, n):
            for factor in factors:
                changed = torch.cat([x[:, :t0], factor * x[:, t0:]], dim=1)
                out[t0] = max(out[t0].item(), (layer(changed)[:, :t0] - base[:, :t0]).abs().max().item())
    return out


CAUSAL, LEAKS = 1e-12, 1e-6  # the grader's reading: causal at t0 when <= CAUSAL, leaking when > LEAKS


def judge_past_changes(call, layer_words, expected):
    def judge(got):
        n = expected.shape[0]
        expect(isinstance(got, torch.Tensor), call, f"returned {kind(got)}; expected a tensor of shape ({n},)")
        expect(tuple(got.shape) == (n,) and got.is_floating_point(), call,
               f"returned {kind(got)}; expected a float tensor of shape ({n},), one reading per split t0")
        expect_within(got, math.inf, call, "a reading")
        expect(bool((got >= 0).all()), call, f"a reading is negative ({got.min().item():.3g}): each is a largest |change|")
        for t0 in range(n):
            mine, theirs = got[t0].item(), expected[t0].item()
            if theirs <= CAUSAL:
                expect(mine <= CAUSAL, call, f"{layer_words}: at t0 = {t0} your reading is {mine:.3g}, but no change of "
                       f"the inputs from t0 on moves an output before t0 (the grader's reading is {theirs:.1g}): "
                       f"does your change leave every input before t0 exactly as it was, and do you compare only the "
                       f"outputs before t0?")
            elif theirs > LEAKS:
                expect(mine > 1e-9, call, f"{layer_words}: at t0 = {t0} your reading is {mine:.3g}, but the grader's "
                       f"change of the inputs from t0 on moves an output before t0 by {theirs:.3g}: the future leaks "
                       f"there. Is your change large enough to move a statistic of all positions (a maximum)?")
    return check(call, judge=judge)


@CHAPTER.task("5.10", "past_changes")
def past_changes(f):
    """pitfall 3's test on layers you did not write: how far the future moves the past"""
    # (what the layer hides, B, N, dim, seed); each layer and input is drawn anew on every run
    cases = (("running", 2, 10, 8, 70), ("global", 2, 10, 8, 72), ("chunk", 2, 11, 6, 74), ("global", 1, 7, 5, 76))
    for hides, B, N, dim, seed in cases:
        see_chunk = 2 + int(torch.randint(3, (1,), generator=gen(seed + 1))) if hides == "chunk" else 1
        layer = SuspectAttention(dim, stabiliser="global" if hides == "global" else "running", see_chunk=see_chunk,
                                 generator=gen(seed))
        x = rand(B, N, dim, seed=seed + 2, scale=3.0)
        words = f"a hidden layer (dim {dim}, N = {N})"
        yield judge_past_changes(f(layer, x), words, past_changes_reference(layer, x))
