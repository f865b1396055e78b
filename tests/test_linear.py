"""Linear attention as feature maps (minilin.linear): the formula, causality for every input, padding,
the recurrent form, edge cases (empty sequences, non-finite inputs, half precision), and the tests every
registry variant gets (minilin.variants): a new entry is covered without editing them."""
import inspect
import warnings

import pytest
import torch

from minilin import variants
from minilin.attention import MultiHeadSelfAttention, sdpa_attention, softmax_attention
from minilin.bench.names import method_examples, parse_method
from minilin.efficient import efficient_attention
from minilin.linear import (EfficientPair, LinearSelfAttention, PositiveRandomFeatures, elu_plus_one,
                            linear_attention, linear_attention_reference, linear_step)
from minilin.model import ATTENTIONS as model_names, LMConfig
from minilin.performer import PerformerSelfAttention, favor_attention, orthogonal_gaussian
from minilin.probes import future_leakage
from helpers import rand

TOL = 1e-12  # float64: only round-off separates the scan from the formula


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, m", [(9, 9), (4, 9), (9, 5)])
@pytest.mark.parametrize("chunk", [1, 3, 128])
def test_elu_plus_one_equals_the_formula(causal, n, m, chunk):
    q, k, v = rand(2, 3, n, 4, seed=1), rand(2, 3, m, 4, seed=2), rand(2, 3, m, 5, seed=3)
    mask = torch.ones(2, m, dtype=torch.bool)
    mask[1, :2] = False  # left padding on one sequence
    got = linear_attention(q, k, v, feature_map=elu_plus_one, mask=mask, causal=causal, chunk_size=chunk)
    want = linear_attention_reference(q, k, v, feature_map=elu_plus_one, mask=mask, causal=causal)
    torch.testing.assert_close(got, want, rtol=0, atol=TOL)
    torch.testing.assert_close(elu_plus_one.features(q, is_query=True), torch.nn.functional.elu(q) + 1,
                               rtol=1e-15, atol=0)  # φ itself: elu(x) + 1, computed as exp(x) for x <= 0


def test_elu_plus_one_stays_positive_in_float32():
    # (exp(x) - 1) + 1 rounds to exactly 0 in float32 below x = -17.3; a query whose features are all 0 then
    # divides 0 by 0. φ computed as exp(x) stays positive, and the output stays the softmax-free weighted mean.
    x = torch.tensor([-20.0, -50.0, -80.0])
    assert (torch.nn.functional.elu(x) + 1 == 0).all()  # the failure this guards against
    assert (elu_plus_one.query(x) > 0).all()
    q = torch.full((1, 1, 3, 4), -30.0)  # every query feature below the float32 cliff
    k, v = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 5)
    for causal in (False, True):
        out = linear_attention(q, k, v, feature_map=elu_plus_one, causal=causal)
        want = linear_attention_reference(q.double(), k.double(), v.double(), feature_map=elu_plus_one, causal=causal)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fmap", ["positive", "efficient"])
@pytest.mark.parametrize("causal", [False, True])
def test_exponential_maps_equal_the_reference(fmap, causal):
    # the shifts of the module docstring's "Stabilisation" cancel: the unshifted (N x M) form agrees
    fm = {"efficient": EfficientPair(),
          "positive": PositiveRandomFeatures(orthogonal_gaussian(16, 4, generator=torch.Generator().manual_seed(7),
                                                                 dtype=torch.float64))}[fmap]
    q, k, v = rand(2, 3, 9, 4, seed=1), rand(2, 3, 11, 4, seed=2), rand(2, 3, 11, 5, seed=3)
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[0, 3:5] = False
    got = linear_attention(q, k, v, feature_map=fm, mask=mask, causal=causal, chunk_size=4)
    want = linear_attention_reference(q, k, v, feature_map=fm, mask=mask, causal=causal)
    torch.testing.assert_close(got, want, rtol=0, atol=TOL)


@pytest.mark.parametrize("fmap", ["elu", "positive", "efficient"])
def test_padded_keys_get_exactly_zero_weight(fmap):
    fm = {"elu": elu_plus_one, "efficient": EfficientPair(),
          "positive": PositiveRandomFeatures(orthogonal_gaussian(16, 4, generator=torch.Generator().manual_seed(0),
                                                                 dtype=torch.float64))}[fmap]
    q, k, v = rand(2, 2, 7, 4, seed=4), rand(2, 2, 7, 4, seed=5), rand(2, 2, 7, 3, seed=6)
    mask = torch.tensor([[True] * 5 + [False] * 2, [False] * 3 + [True] * 4])
    for causal in (False, True):
        ref = linear_attention(q, k, v, feature_map=fm, mask=mask, causal=causal)
        k2, v2 = k.clone(), v.clone()
        k2[~mask[:, None, :].expand(2, 2, 7)] = 1e3  # huge padded keys would dominate any max they entered
        v2[~mask[:, None, :].expand(2, 2, 7)] = 1e6
        out = linear_attention(q, k2, v2, feature_map=fm, mask=mask, causal=causal)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fmap", ["elu", "positive", "efficient"])
def test_recurrent_step_equals_the_causal_scan(fmap):
    fm = {"elu": elu_plus_one, "efficient": EfficientPair(),
          "positive": PositiveRandomFeatures(orthogonal_gaussian(12, 4, generator=torch.Generator().manual_seed(1),
                                                                 dtype=torch.float64))}[fmap]
    q, k, v = rand(2, 3, 11, 4, seed=8, scale=3.0), rand(2, 3, 11, 4, seed=9, scale=3.0), rand(2, 3, 11, 5, seed=10)
    full = linear_attention(q, k, v, feature_map=fm, causal=True, chunk_size=4)
    out_a, state = linear_step(q[:, :, :6], k[:, :, :6], v[:, :, :6], feature_map=fm)
    out_b, state = linear_step(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], state, feature_map=fm)
    torch.testing.assert_close(torch.cat([out_a, out_b], dim=2), full, rtol=0, atol=1e-12)
    assert state.position == 11 and state.kv.shape == (2, 3, q.shape[-1] if fmap != "positive" else 12, 5)


# ---- causal means causal for every input -------------------------------------------------------------------

def _causal_paths():
    w = orthogonal_gaussian(16, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    return {
        "softmax": lambda q, k, v: softmax_attention(q, k, v, causal=True),
        "sdpa": lambda q, k, v: sdpa_attention(q, k, v, causal=True),
        "performer": lambda q, k, v: favor_attention(q, k, v, w, causal=True, chunk_size=4),
        "performer-trig": lambda q, k, v: favor_attention(q, k, v, w, kernel="trig", causal=True, chunk_size=4),
        "linear": lambda q, k, v: linear_attention(q, k, v, feature_map=elu_plus_one, causal=True, chunk_size=4),
        "efficient": lambda q, k, v: efficient_attention(q, k, v, causal=True, chunk_size=4),
        "efficient-bucket": lambda q, k, v: efficient_attention(q, k, v, causal=True, bucket_size=4),
    }


@pytest.mark.parametrize("path", list(_causal_paths()))
@pytest.mark.parametrize("where", ["q", "k"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("s", [5, 8, 13])
def test_a_non_finite_future_input_never_reaches_the_past(path, where, bad, s):
    fn = _causal_paths()[path]
    q, k, v = rand(1, 2, 14, 8, seed=11), rand(1, 2, 14, 8, seed=12), rand(1, 2, 14, 8, seed=13)
    clean = fn(q, k, v)
    poisoned = {"q": q.clone(), "k": k.clone()}
    poisoned[where][0, 1, s, 3] = bad
    out = fn(poisoned["q"], poisoned["k"], v)
    assert torch.equal(out[:, :, :s], clean[:, :, :s])  # bit-identical before position s
    if where == "k" and bad != bad:  # NaN in, NaN out where it belongs: every later output of that head
        assert torch.isnan(out[0, 1, s + 1:]).all() or path == "efficient-bucket"


@pytest.mark.parametrize("path", ["performer", "linear", "efficient"])
def test_non_causal_nan_is_nan_out_not_zero(path):
    q, k, v = rand(1, 1, 6, 8, seed=14), rand(1, 1, 6, 8, seed=15), rand(1, 1, 6, 8, seed=16)
    k[0, 0, 2, 0] = float("nan")
    fn = {"performer": lambda: favor_attention(q, k, v, orthogonal_gaussian(16, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)),
          "linear": lambda: linear_attention(q, k, v, feature_map=elu_plus_one),
          "efficient": lambda: efficient_attention(q, k, v)}[path]
    assert torch.isnan(fn()).all()  # as exact attention: a NaN key reaches every query


# ---- scale: no silent zero rows -----------------------------------------------------------------------------

def _run_recording_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, any(issubclass(w.category, RuntimeWarning) for w in caught)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("scale", [10.0, 100.0])
def test_efficient_causal_is_right_or_says_so_at_large_inputs(dtype, scale):
    q, k, v = (rand(1, 2, 128, 64, seed=s, scale=scale).to(dtype) for s in (17, 18, 19))
    q64, k64, v64 = q.double(), k.double(), v.double()  # the same (rounded) inputs, in float64 and log space:
    log_w = torch.logsumexp(torch.log_softmax(q64, -1)[..., :, None, :] + k64[..., None, :, :], -1)  # (B, H, N, M)
    future = ~torch.ones(128, 128, dtype=torch.bool).tril()
    ref = torch.softmax(log_w.masked_fill(future, -float("inf")), -1) @ v64
    out, warned = _run_recording_warnings(lambda: efficient_attention(q, k, v, causal=True))
    assert out.dtype == dtype and torch.isfinite(out).all()
    # computed in float32 inside: the error is the output's own rounding to `dtype`, relative to |v|
    err = ((out.double() - ref).abs().amax() / v64.abs().amax()).item()
    right = err < {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}[dtype]
    if scale == 10.0:  # it returned 23 zero rows of 128 in float16 here
        assert right and not warned
    else:  # exponents 100 apart inside one chunk: right, or a RuntimeWarning, never silently wrong
        assert right or warned


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1.0, 10.0, 100.0])
@pytest.mark.parametrize("causal", [False, True])
def test_favor_never_returns_a_silent_zero_row(dtype, scale, causal):
    w = orthogonal_gaussian(64, 16, generator=torch.Generator().manual_seed(4), dtype=dtype)
    q, k, v = (rand(1, 2, 64, 16, seed=s, scale=scale).to(dtype) for s in (20, 21, 22))
    v = v / scale
    out, warned = _run_recording_warnings(lambda: favor_attention(q, k, v, w, causal=causal))
    assert torch.isfinite(out).all()
    zero_rows = bool((out.abs().amax(-1) == 0).any())
    assert warned or not zero_rows
    assert (out.abs() <= v.abs().amax() * (1 + 1e-5)).all()  # a convex combination of values
    if not causal or scale == 1.0:  # one scale per feature over all keys: nothing can be lost
        assert not warned and not zero_rows


# ---- edge cases -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, m", [(0, 5), (5, 0), (0, 0)])
@pytest.mark.parametrize("causal", [False, True])
def test_empty_sequences_give_the_empty_or_zero_result(n, m, causal):
    q, k, v = rand(2, 3, n, 4), rand(2, 3, m, 4), rand(2, 3, m, 5)
    w = orthogonal_gaussian(8, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for fn in (softmax_attention, sdpa_attention, efficient_attention,
               lambda *a, **kw: favor_attention(*a, w, **kw),
               lambda *a, **kw: linear_attention(*a, feature_map=elu_plus_one, **kw)):
        out = fn(q, k, v, causal=causal)
        assert out.shape == (2, 3, n, 5) and torch.equal(out, torch.zeros_like(out))


def test_modules_accept_empty_sequences_and_empty_steps():
    module = PerformerSelfAttention(8, 2, nb_features=8)
    assert module(torch.zeros(1, 0, 8), causal=True).shape == (1, 0, 8)
    y, state = module.step(torch.zeros(1, 0, 8))
    assert y.shape == (1, 0, 8) and state.position == 0


# ---- every registry variant (parametrized over minilin.variants.ATTENTIONS) ------------------------------------

CAUSAL = [n for n in variants.ATTENTIONS if variants.VARIANTS[n].causal]
RECURRENT = [n for n in variants.ATTENTIONS if variants.VARIANTS[n].recurrent]


def registry_module(name, dim=8, seq_len=8):
    """Variant `name` built as TinyLM builds it (its options from an LMConfig): 2 heads, float64, no dropout."""
    config = LMConfig(dim=dim, heads=2, depth=1, block_size=seq_len, proj_len=4, nb_features=8, attention=name,
                      causal=variants.VARIANTS[name].causal)
    return variants.module_for_layer(config, 0).double()


def test_the_registry_has_at_least_the_six_variants():
    assert {"exact", "sdpa", "linformer", "performer", "linear", "efficient"} <= set(variants.ATTENTIONS)
    assert model_names == variants.ATTENTIONS  # one spelling: LMConfig and the train command take these
    assert variants.resolve("minilin.linear:LinearSelfAttention") is LinearSelfAttention


@pytest.mark.parametrize("name", variants.ATTENTIONS)
def test_module_shape_contract_and_padding(name):
    module = registry_module(name)
    x, other = rand(2, 8, 8, seed=27), rand(2, 8, 8, seed=28)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 5:] = False
    x_other = torch.where(mask[..., None], x, other)  # the same real tokens, different padding
    y = module(x, mask=mask)
    assert y.shape == x.shape and y.dtype == x.dtype and torch.isfinite(y).all()
    torch.testing.assert_close(module(x_other, mask=mask)[mask], y[mask], rtol=0, atol=TOL)  # padding is ignored
    assert module(x[:, :5]).shape == (2, 5, 8)  # shorter sequences too


@pytest.mark.parametrize("name", CAUSAL)
def test_causal_variants_never_see_the_future(name):
    module = registry_module(name, dim=16, seq_len=24)
    x = rand(1, 24, 16, seed=7)
    assert future_leakage(lambda t: module(t, causal=True), x, generator=torch.Generator().manual_seed(0)) == 0.0


@pytest.mark.parametrize("name", [n for n in variants.ATTENTIONS if n not in CAUSAL])
def test_non_causal_variants_refuse_causal(name):
    with pytest.raises(ValueError, match="cannot be causal"):
        registry_module(name)(rand(1, 8, 8), causal=True)


@pytest.mark.parametrize("name", [n for n in variants.ATTENTIONS if not variants.VARIANTS[n].bidirectional])
def test_causal_only_variants_refuse_non_causal(name):
    # a recurrence has no bidirectional form: the module, a masked-LM config and a non-causal bench name all say so
    with pytest.raises(ValueError, match="causal by construction"):
        registry_module(name)(rand(1, 8, 8), causal=False)
    with pytest.raises(ValueError, match="causal by construction"):
        variants.module_for_layer(LMConfig(dim=8, heads=2, depth=1, attention=name, causal=False), 0)
    with pytest.raises(ValueError, match=f"add '-causal': {name}-causal"):
        parse_method(name)


@pytest.mark.parametrize("name", variants.ATTENTIONS)
def test_step_is_forward_for_every_recurrent_variant(name):
    module = registry_module(name)
    assert module.recurrent == variants.VARIANTS[name].recurrent
    x = rand(2, 7, 8, seed=29)
    if name not in RECURRENT:
        with pytest.raises(NotImplementedError, match="no recurrent one-token form"):
            module.step(x[:, :1])
        return
    state, outs = None, []
    for t in range(7):
        y, state = module.step(x[:, t:t + 1], state)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, dim=1), module(x, causal=True), rtol=0, atol=TOL)


@pytest.mark.parametrize("name", variants.ATTENTIONS)
def test_module_dtype_mismatch_is_our_error(name):
    module = registry_module(name).float()
    with pytest.raises(ValueError, match=r"x is torch.float64 but the module's weights are torch.float32"):
        module(torch.zeros(1, 4, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="floating-point"):
        module(torch.zeros(1, 4, 8, dtype=torch.long))


@pytest.mark.parametrize("name", variants.ATTENTIONS)
def test_no_warning_on_ordinary_use(name):
    module = registry_module(name).float()
    x = rand(2, 8, 8, seed=26, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module(x, causal=variants.VARIANTS[name].causal)


def test_every_attention_module_is_keyword_only_after_heads():
    classes = {MultiHeadSelfAttention, LinearSelfAttention} | {type(registry_module(n)) for n in variants.ATTENTIONS}
    for cls in classes:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # drop self
        assert [p.name for p in params[:2]] == ["dim", "heads"], cls
        assert all(p.kind is p.KEYWORD_ONLY for p in params[2:]), (cls, [p for p in params[2:] if p.kind is not p.KEYWORD_ONLY])
        assert issubclass(cls, MultiHeadSelfAttention)


@pytest.mark.parametrize("text", method_examples())
def test_method_names_round_trip(text):
    assert parse_method(text).name == text


def test_hyphenated_variant_names_parse():
    # the grammar is the registry's names, not a word: a hyphen inside a name is not a flag
    m = parse_method("gated-deltanet-causal")
    assert (m.variant, m.causal, m.peer, m.name) == ("gated-deltanet", True, False, "gated-deltanet-causal")
    assert parse_method("deltanet-causal").variant == "deltanet"
    assert parse_method("peer-linformer-k8").proj_len == 8 and parse_method("performer-causal-m64").nb_features == 64


@pytest.mark.parametrize("bad, match", [("favor", "unknown method"), ("linformer-causal-k8", "cannot be causal"),
                                        ("peer-linear", "no third-party"), ("linformer", "projected length"),
                                        ("exact-m8", "performer only"), ("gla", "causal by construction"),
                                        ("gated", "unknown method"), ("gated-deltanet-causal-k8", "linformer only")])
def test_bad_method_names_say_why(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_method(bad)


# ---- the chunk-to-chunk states without a Python loop (minilin.linear.chunk_states) ---------------------------

def _states_loop(writes, log_decay, initial):
    """chunk_states' definition, one chunk at a time."""
    state = torch.zeros_like(writes[:, :, 0]) if initial is None else initial
    after = []
    for t in range(writes.shape[2]):
        state = (state if log_decay is None else torch.exp(log_decay[:, :, t])[..., None, None] * state) \
            + writes[:, :, t]
        after.append(state)
    return torch.stack(after, dim=2)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 9, 16, 17, 50])
@pytest.mark.parametrize("decay", [None, "mild", "strong"])
@pytest.mark.parametrize("initial", [False, True])
def test_chunk_states_equal_the_loop(n, decay, initial):
    from minilin.linear import chunk_states
    writes = rand(2, 3, n, 4, 5, seed=n)
    log_decay = None if decay is None else -rand(2, 3, n, seed=n + 1).abs() * {"mild": 0.3, "strong": 300.0}[decay]
    init = rand(2, 3, 4, 5, seed=n + 2) if initial else None
    after = _states_loop(writes, log_decay, init)
    start = torch.zeros_like(writes[:, :, :1]) if init is None else init[:, :, None]
    before, final = chunk_states(writes, log_decay, init)
    torch.testing.assert_close(before, torch.cat([start, after[:, :, :-1]], dim=2), rtol=1e-12, atol=TOL)
    torch.testing.assert_close(final, after[:, :, -1], rtol=1e-12, atol=TOL)


@pytest.mark.parametrize("decay", [False, True])
def test_chunk_states_non_finite_write_reaches_no_earlier_state(decay):
    from minilin.linear import chunk_states
    writes, log_decay = rand(1, 2, 20, 3, 3, seed=1), (-rand(1, 2, 20, seed=2).abs() if decay else None)
    clean, _ = chunk_states(writes, log_decay)
    writes[0, 1, 11, 2, 0] = float("nan")
    got, final = chunk_states(writes, log_decay)
    assert torch.equal(got[:, :, :12], clean[:, :, :12])  # bit-identical up to the bad chunk's own start
    assert torch.isnan(got[0, 1, 12:, 2, 0]).all() and torch.isnan(final[0, 1, 2, 0])


def _count_ops(fn):
    """The number of aten operations fn() runs (every kernel call torch dispatches)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.calls


@pytest.mark.parametrize("case", ["linear", "linear-backward", "exponential", "retention", "mamba2-gate",
                                  "chunk-states"])
def test_op_count_does_not_grow_with_the_number_of_chunks(case):
    # The chunk-to-chunk state has no Python loop: 4 and 32 scanned chunks run the same number of operations
    # (a loop over chunks adds a few per chunk, ≥ 28 more here). chunk_states' blocks are 2 and 4 chunks long
    # there (s ≈ (2n)^(1/3)), so neither needs zero-padding (which adds two operations).
    from minilin import gated
    from minilin.linear import chunk_states

    def run(nc):
        c = 4
        q, k, v = rand(1, 2, nc * c, 3, seed=1), rand(1, 2, nc * c, 3, seed=2), rand(1, 2, nc * c, 3, seed=3)
        if case == "linear":
            return lambda: linear_attention(q, k, v, feature_map=elu_plus_one, causal=True, chunk_size=c)
        if case == "linear-backward":
            q.requires_grad_(True)
            return lambda: linear_attention(q, k, v, feature_map=elu_plus_one, causal=True,
                                            chunk_size=c).sum().backward()
        if case == "exponential":
            return lambda: linear_attention(q, k, v, feature_map=EfficientPair(), causal=True, chunk_size=c)
        if case == "retention":
            return lambda: gated.retention(q, k, v, 0.9, chunk_size=c, initial_state=rand(1, 2, 3, 3, seed=4))
        if case == "mamba2-gate":
            g = -rand(1, 2, nc * c, seed=5).abs()
            return lambda: gated.gla(q, k, v, g, chunk_size=c)
        return lambda: chunk_states(rand(1, 2, nc, 3, 4, seed=6), -rand(1, 2, nc, seed=7).abs(),
                                    rand(1, 2, 3, 4, seed=8))

    assert _count_ops(run(4)) == _count_ops(run(32))
