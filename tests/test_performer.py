"""FAVOR+ (minilin.performer): projections, feature maps, exact algebra of the linear forms (float64),
the estimator's statistics (seeded), causality, padding, half precision, the module, and performer-pytorch.
"""

import math
from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from minilin.attention import MultiHeadSelfAttention, softmax_attention
from minilin.linear import PositiveRandomFeatures, linear_attention_reference
from minilin.performer import (
    FavorState,
    PerformerSelfAttention,
    causal_key_features,
    causal_linear_attention,
    favor_attention,
    favor_step,
    gaussian_projection,
    global_linear_attention,
    orthogonal_gaussian,
    positive_features,
    trig_features,
)
from minilin.probes import future_leakage
from helpers import TOL, gen, qkv



def quadratic_reference(q, k, v, projection, *, mask=None, causal=False):
    """The spec: the (N, M) matrix φ(Q) φ(K)ᵀ with *unstabilised* FAVOR+ features, masked, normalised."""
    return linear_attention_reference(q, k, v, feature_map=PositiveRandomFeatures(projection), mask=mask,
                                      causal=causal)


# ---- projections ----------------------------------------------------------------------------------------

def test_projections_are_deterministic_and_dtype_independent():
    a = orthogonal_gaussian(20, 8, generator=gen(1), dtype=torch.float64)
    b = orthogonal_gaussian(20, 8, generator=gen(1), dtype=torch.float32)
    c = orthogonal_gaussian(20, 8, generator=gen(2), dtype=torch.float64)
    assert a.shape == (20, 8) and b.dtype == torch.float32
    torch.testing.assert_close(a.float(), b, rtol=0, atol=0)  # drawn in float64, then cast
    assert not torch.allclose(a, c)
    torch.testing.assert_close(gaussian_projection(5, 3, generator=gen(4)),
                               gaussian_projection(5, 3, generator=gen(4)), rtol=0, atol=0)


def test_orthogonal_blocks_and_row_norms():
    d = 8
    w = orthogonal_gaussian(20, d, generator=gen(3), scaling="fixed", dtype=torch.float64)  # 2 full blocks + 4
    torch.testing.assert_close(w.norm(dim=1), torch.full((20,), math.sqrt(d), dtype=torch.float64))
    for block in (w[:8], w[8:16], w[16:]):
        gram = block @ block.T
        torch.testing.assert_close(gram, d * torch.eye(len(block), dtype=torch.float64), rtol=0, atol=1e-12)
    assert float((w[:8] @ w[8:16].T).abs().max()) > 1e-3  # different blocks are independent, not orthogonal
    chi = orthogonal_gaussian(20, d, generator=gen(3), scaling="chi", dtype=torch.float64)
    unit = chi / chi.norm(dim=1, keepdim=True)
    torch.testing.assert_close(unit[:8] @ unit[:8].T, torch.eye(8, dtype=torch.float64), rtol=0, atol=1e-12)


def test_chi_scaled_rows_have_gaussian_second_moment():
    # Unbiasedness needs E[w wᵀ] = I. Seed 5, 4000 rows of d=4: each entry of the sample second moment has
    # standard error ~ sqrt(2/4000) = 0.022 on the diagonal, 0.016 off it; 0.1 is > 4 standard errors.
    w = orthogonal_gaussian(4000, 4, generator=gen(5), dtype=torch.float64)
    torch.testing.assert_close(w.T @ w / 4000, torch.eye(4, dtype=torch.float64), rtol=0, atol=0.1)


def test_projection_argument_errors():
    with pytest.raises(TypeError, match="generator"):
        orthogonal_gaussian(4, 4, generator=None)
    with pytest.raises(ValueError, match="scaling"):
        orthogonal_gaussian(4, 4, generator=gen(0), scaling="unit")
    q, k, v = qkv(N=11, D=8)
    with pytest.raises(ValueError, match="nb_features, head_dim"):
        favor_attention(q, k, v, torch.randn(16, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="kernel"):
        favor_attention(q, k, v, torch.randn(16, 8, dtype=torch.float64), kernel="relu")
    with pytest.raises(ValueError, match="chunk_size"):
        favor_attention(q, k, v, torch.randn(16, 8, dtype=torch.float64), causal=True, chunk_size=0)
    with pytest.raises(ValueError, match="bool"):
        favor_attention(q, k, v, torch.randn(16, 8, dtype=torch.float64), mask=torch.ones(2, 11))


# ---- feature maps: exact algebra -------------------------------------------------------------------------

def test_stabilised_features_differ_by_factors_that_cancel():
    q, k, _ = qkv(N=6, M=9, seed=7, D=8)
    w = orthogonal_gaussian(24, 8, generator=gen(8), dtype=torch.float64)
    exact_q = positive_features(q, w, is_query=True, stabilize=False)
    exact_k = positive_features(k, w, is_query=False, stabilize=False)
    stable_q = positive_features(q, w, is_query=True)
    stable_k = positive_features(k, w, is_query=False)
    rq = stable_q / exact_q  # one factor per query row
    torch.testing.assert_close(rq, rq[..., :1].expand_as(rq), rtol=1e-12, atol=0)
    rk = stable_k / exact_k  # one factor per (batch, head) for all keys
    torch.testing.assert_close(rk, rk[..., :1, :1].expand_as(rk), rtol=1e-12, atol=0)
    for t in (stable_q, stable_k):  # the largest feature is exactly 1/√m: nothing over- or underflows
        torch.testing.assert_close(t.amax(dim=(-1,) if t is stable_q else (-2, -1)),
                                   torch.full_like(t.amax(dim=(-1,) if t is stable_q else (-2, -1)), 24 ** -0.5))


def test_causal_key_features_use_a_running_max():
    _, k, _ = qkv(N=1, M=12, seed=50, D=8)
    w = orthogonal_gaussian(24, 8, generator=gen(51), dtype=torch.float64)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, :4] = False  # left padding: no key seen at first
    psi, r = causal_key_features(k, w, mask=mask)
    exact = positive_features(k, w, is_query=False, stabilize=False, mask=mask)
    torch.testing.assert_close(psi * torch.exp(r)[..., None], exact, rtol=1e-12, atol=0)
    assert (r[..., 1:] >= r[..., :-1]).all() and float(psi.max()) <= 24 ** -0.5 * (1 + 1e-12)
    assert (psi[1, :, :4] == 0).all()
    # r_j is the max over positions <= j only
    e_max = torch.log(exact * math.sqrt(24)).amax(-1)  # (B, H, M)
    torch.testing.assert_close(r[0, :, 5], e_max[0, :, :6].amax(-1))



def test_any_shift_a_ratio_shares_cancels():
    """Notebook 04, section 5: any per-query shift and any one shift of all keys cancel in the ratio (no max needed)."""
    q, k, v = qkv(B=2, H=3, N=40, D=16, seed=8, scale=0.8)
    w = orthogonal_gaussian(64, 16, generator=gen(9), dtype=torch.float64)
    expo = lambda x: (x * 16 ** -0.25) @ w.T - (x * x).sum(-1, keepdim=True) / 8  # wᵀx' − |x'|²/2
    shifts = 30 * torch.rand(2, 3, 40, 1, generator=gen(12), dtype=torch.float64)
    a = torch.exp(expo(q) - shifts) @ torch.exp(expo(k) - 7.0).transpose(-2, -1)
    torch.testing.assert_close((a / a.sum(-1, keepdim=True)) @ v, quadratic_reference(q, k, v, w), rtol=0, atol=TOL)

@pytest.mark.parametrize("causal", [False, True])
def test_float32_is_accurate_at_head_dim_128(causal):
    """A data-free key bound (|w|²/2) is loose by ~D/2 in the exponent: at D=128 key features fall near e^-81 and float32 products underflow."""
    q, k, v = qkv(B=1, H=2, N=200, D=128, seed=52, scale=1.5)
    w = orthogonal_gaussian(128, 128, generator=gen(53), dtype=torch.float64)
    ref = favor_attention(q, k, v, w, causal=causal, chunk_size=64)
    low = favor_attention(q.float(), k.float(), v.float(), w.float(), causal=causal, chunk_size=64)
    torch.testing.assert_close(low.double(), ref, rtol=0, atol=1e-4)  # float32 round-off ~1e-6 relative


def test_features_match_their_formulas():
    x = torch.randn(3, 5, generator=gen(9), dtype=torch.float64)
    w = gaussian_projection(7, 5, generator=gen(10), dtype=torch.float64)
    xs = x * 5 ** -0.25
    pos = torch.exp(xs @ w.T - 0.5 * (xs * xs).sum(-1, keepdim=True)) / math.sqrt(7)
    torch.testing.assert_close(positive_features(x, w, is_query=False, stabilize=False), pos, rtol=1e-13, atol=0)
    trig = torch.exp(0.5 * (xs * xs).sum(-1, keepdim=True)) / math.sqrt(7) * torch.cat(
        [torch.sin(xs @ w.T), torch.cos(xs @ w.T)], -1)
    torch.testing.assert_close(trig_features(x, w), trig, rtol=1e-13, atol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_favor_equals_quadratic_form_with_the_same_features(causal):
    q, k, v = qkv(N=13, seed=11, scale=0.7, D=8)
    mask = torch.rand(2, 13, generator=gen(12)) > 0.3
    w = orthogonal_gaussian(20, 8, generator=gen(13), dtype=torch.float64)
    for m in (None, mask):
        ours = favor_attention(q, k, v, w, mask=m, causal=causal, chunk_size=4)
        torch.testing.assert_close(ours, quadratic_reference(q, k, v, w, mask=m, causal=causal), rtol=0, atol=TOL)


@st.composite
def causal_cases(draw):
    B, H = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    N, M = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    m, D, Dv = draw(st.integers(1, 9)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    chunk = draw(st.integers(1, 14))
    bits = draw(st.lists(st.booleans(), min_size=B * M, max_size=B * M))
    seed = draw(st.integers(0, 2**16))
    q, k, v = qkv(B, H, N, M, D, Dv, seed=seed)
    w = gaussian_projection(m, D, generator=gen(seed + 1), dtype=torch.float64)
    mask = torch.tensor(bits).view(B, M) if draw(st.booleans()) else None
    return q, k, v, w, mask, chunk


@given(causal_cases())
def test_chunked_causal_matches_quadratic_spec(case):
    """Any N, M (bottom-right alignment), any chunk size, padding, fully-masked rows."""
    q, k, v, w, mask, chunk = case
    ours = favor_attention(q, k, v, w, mask=mask, causal=True, chunk_size=chunk)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours, quadratic_reference(q, k, v, w, mask=mask, causal=True), rtol=0, atol=TOL)


@pytest.mark.parametrize("chunk", [1, 3, 16, 64, 100])
def test_chunk_sizes_agree(chunk):
    q, k, v = qkv(B=1, H=2, N=64, D=16, seed=14)
    w = orthogonal_gaussian(32, 16, generator=gen(15), dtype=torch.float64)
    ref = favor_attention(q, k, v, w, causal=True, chunk_size=64)
    torch.testing.assert_close(favor_attention(q, k, v, w, causal=True, chunk_size=chunk), ref, rtol=0, atol=TOL)


@pytest.mark.parametrize("kernel", ["positive", "trig"])
def test_recurrent_step_equals_chunked(kernel):
    q, k, v = qkv(N=19, Dv=5, seed=16, scale=0.5, D=8)
    w = orthogonal_gaussian(12, 8, generator=gen(17), dtype=torch.float64)
    ref = favor_attention(q, k, v, w, kernel=kernel, causal=True, chunk_size=5)
    state, outs = None, []
    for t in range(19):
        out, state = favor_step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], w, state, kernel=kernel)
        outs.append(out)
    features = 24 if kernel == "trig" else 12  # trig: sin and cos of 12 directions
    assert isinstance(state, FavorState) and state.position == 19 and state.kv.shape == (2, 3, features, 5)
    torch.testing.assert_close(torch.cat(outs, dim=2), ref, rtol=0, atol=TOL)
    # several tokens per call: the same recurrence
    out_a, st_a = favor_step(q[:, :, :7], k[:, :, :7], v[:, :, :7], w, kernel=kernel)
    out_b, _ = favor_step(q[:, :, 7:], k[:, :, 7:], v[:, :, 7:], w, st_a, kernel=kernel)
    torch.testing.assert_close(torch.cat([out_a, out_b], 2), ref, rtol=0, atol=TOL)


def test_causal_last_row_equals_non_causal():
    q, k, v = qkv(N=10, seed=18, D=8)
    w = orthogonal_gaussian(16, 8, generator=gen(19), dtype=torch.float64)
    c = favor_attention(q, k, v, w, causal=True, chunk_size=3)
    n = favor_attention(q, k, v, w)
    torch.testing.assert_close(c[:, :, -1], n[:, :, -1], rtol=0, atol=TOL)
    assert (c[:, :, 0] - n[:, :, 0]).abs().max() > 1e-2  # the first query really sees less


def test_linear_attention_needs_no_n_by_n_matrix():
    """Associativity: φ(Q)(φ(K)ᵀV) == (φ(Q)φ(K)ᵀ)V, checked on the bare linear forms."""
    g = gen(20)
    pq = torch.rand(1, 1, 6, 4, generator=g, dtype=torch.float64)
    pk = torch.rand(1, 1, 9, 4, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, 9, 3, generator=g, dtype=torch.float64)
    a = pq @ pk.transpose(-2, -1)
    torch.testing.assert_close(global_linear_attention(pq, pk, v), (a / a.sum(-1, keepdim=True)) @ v, rtol=0, atol=TOL)
    ca = a * torch.ones(6, 9, dtype=torch.bool).tril(diagonal=3)  # bottom-right: M − N = 3
    torch.testing.assert_close(causal_linear_attention(pq, pk, v, chunk_size=2), (ca / ca.sum(-1, keepdim=True)) @ v,
                               rtol=0, atol=TOL)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck(causal):
    """Analytic gradients (detached maxima, the custom ratio backward) match finite differences."""
    q, k, v = qkv(B=1, H=2, N=5, M=7, D=3, seed=54)
    w = orthogonal_gaussian(4, 3, generator=gen(55), dtype=torch.float64)
    mask = torch.tensor([[False, True, True, False, True, True, True]])
    fn = lambda a, b, c: favor_attention(a, b, c, w, mask=mask, causal=causal, chunk_size=2)  # noqa: E731
    assert torch.autograd.gradcheck(fn, tuple(t.requires_grad_(True) for t in (q, k, v)))


# ---- causality and padding ------------------------------------------------------------------------------

def test_causal_favor_has_no_future_leakage():
    torch.manual_seed(0)
    mod = PerformerSelfAttention(12, heads=2, nb_features=8).double()
    x = torch.randn(1, 10, 12, generator=gen(21), dtype=torch.float64)
    mod.chunk_size = 4  # several chunks, so both the intra-chunk mask and the prefix sums are probed
    assert future_leakage(lambda t: mod(t, causal=True), x, generator=gen(22)) == 0.0
    assert future_leakage(lambda t: mod(t, causal=False), x, generator=gen(22)) > 1e-3  # the probe can fail


def test_causal_outputs_ignore_future_values_exactly():
    """Perturbing the future changes nothing of the past, bit for bit (the key scale is a running max over past positions only)."""
    q, k, v = qkv(B=1, H=2, N=20, seed=23, D=8)
    w = orthogonal_gaussian(16, 8, generator=gen(24), dtype=torch.float64)
    ref = favor_attention(q, k, v, w, causal=True, chunk_size=8)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 13:] *= 5.0
    v2[:, :, 13:] += 100.0
    out = favor_attention(q, k2, v2, w, causal=True, chunk_size=8)
    assert torch.equal(out[:, :, :13], ref[:, :, :13])


@pytest.mark.parametrize("causal", [False, True])
def test_padded_keys_have_no_influence(causal):
    q, k, v = qkv(N=12, seed=25, D=8)
    w = orthogonal_gaussian(16, 8, generator=gen(26), dtype=torch.float64)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, 8:] = False
    mask[1, 2:5] = False
    ref = favor_attention(q, k, v, w, mask=mask, causal=causal, chunk_size=5)
    k2, v2 = k.clone(), v.clone()
    pad = ~mask[:, None, :, None]
    k2 = torch.where(pad, 3.0 * k2 + 1.0, k2)
    v2 = torch.where(pad, v2 - 50.0, v2)
    assert torch.equal(favor_attention(q, k2, v2, w, mask=mask, causal=causal, chunk_size=5), ref)
    if not causal:  # and a mask is the same as dropping the keys
        kept = favor_attention(q[:1], k[:1, :, :8], v[:1, :, :8], w)
        torch.testing.assert_close(ref[:1], kept, rtol=0, atol=TOL)
    # zeroing k instead of masking is NOT padding: φ(0) = 1/√m, not 0 (performer-pytorch#89)
    zeroed = favor_attention(q, torch.where(pad, 0.0, k), v, w, causal=causal, chunk_size=5)
    assert (zeroed - ref).abs().max() > 1e-2


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v = qkv(N=6, seed=27, D=8)
    w = orthogonal_gaussian(8, 8, generator=gen(28), dtype=torch.float64)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0] = False
    mask[1, :3] = False  # causal + left padding: queries 0..2 see nothing
    k.requires_grad_(True)
    for causal in (False, True):
        out = favor_attention(q, k, v, w, mask=mask, causal=causal)
        assert torch.isfinite(out).all() and (out[0] == 0).all()
        if causal:
            assert (out[1, :, :3] == 0).all()
        (g,) = torch.autograd.grad(out.sum(), k)
        assert torch.isfinite(g).all()


# ---- half precision --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_finite_for_large_inputs(dtype):
    """|x| up to 20 (head_dim 32): exp would overflow float16 at ~11; we must stay finite, values and grads."""
    g = gen(29)
    q, k, v = (torch.empty(2, 2, 40, 32).uniform_(-20, 20, generator=g).to(dtype) for _ in range(3))
    q[0, 0, 0] = 20.0
    k[0, 0, 1] = -20.0
    w = orthogonal_gaussian(64, 32, generator=gen(30), dtype=dtype)
    for causal in (False, True):
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        out = favor_attention(qq, kk, vv, w, causal=causal, chunk_size=16)
        assert out.dtype == dtype and torch.isfinite(out).all()
        out.float().square().sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (qq, kk, vv))
    out, state = favor_step(q[:, :, :1], k[:, :, :1], v[:, :, :1], w)
    assert torch.isfinite(out).all() and torch.isfinite(state.kv).all()


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-2), (torch.bfloat16, 6e-2)])
def test_half_precision_agrees_with_float64(dtype, tol):
    # tol: inputs rounded to 11 (fp16) / 8 (bf16) mantissa bits, outputs O(1) -> ~1e-3 / 1e-2 relative, x4+
    q, k, v = qkv(B=1, H=2, N=50, D=32, seed=31, scale=1.0)
    w = orthogonal_gaussian(64, 32, generator=gen(32), dtype=torch.float64)
    for causal in (False, True):
        ref = favor_attention(q, k, v, w, causal=causal)
        low = favor_attention(q.to(dtype), k.to(dtype), v.to(dtype), w.to(dtype), causal=causal)
        torch.testing.assert_close(low.double(), ref, rtol=0, atol=tol)


# ---- the estimator's statistics (seeded) -----------------------------------------------------------------

def _kernel_estimates(x, y, *, draws, m, ortho, kernel="positive", seed):
    """`draws` independent estimates of exp(xᵀy), each from m features (normalize=False: the plain kernel).

    One projection of draws·m rows, cut into `draws` groups of m (for ortho, m is a multiple of d, so each
    group is made of whole, independent orthogonal blocks). x, y: (P, d) -> (draws, P).
    """
    d = x.shape[-1]
    assert not ortho or m % d == 0
    draw = orthogonal_gaussian if ortho else gaussian_projection
    w = draw(draws * m, d, generator=gen(seed), dtype=torch.float64)  # (draws·m, d)
    if kernel == "positive":
        fx, fy = (positive_features(t, w, is_query=False, stabilize=False, normalize=False) for t in (x, y))
        fx, fy = fx.view(-1, draws, m), fy.view(-1, draws, m)  # (P, draws, m)
    else:
        fx, fy = (trig_features(t, w, normalize=False).view(-1, 2, draws, m) for t in (x, y))  # sin | cos
        fx, fy = fx.transpose(1, 2), fy.transpose(1, 2)  # (P, draws, 2, m)
    est = (fx * fy).flatten(2).sum(-1) * draws  # 1/√(draws·m) per feature -> 1/√m: multiply by draws
    return est.T  # (draws, P)


def _pairs(d, norm, cos, seed):
    """P pairs with |x| = |y| = norm and xᵀy = norm²·cos."""
    g = gen(seed)
    x = torch.nn.functional.normalize(torch.randn(len(cos), d, generator=g, dtype=torch.float64), dim=-1)
    r = torch.nn.functional.normalize(torch.randn(len(cos), d, generator=g, dtype=torch.float64), dim=-1)
    r = torch.nn.functional.normalize(r - (r * x).sum(-1, keepdim=True) * x, dim=-1)  # ⊥ x
    c = torch.tensor(cos, dtype=torch.float64)[:, None]
    y = c * x + torch.sqrt(1 - c * c) * r
    return norm * x, norm * y


@pytest.mark.parametrize("ortho", [False, True])
def test_positive_estimator_is_unbiased(ortho):
    # Seed 33, 4000 draws of m=6 features, d=6, 3 pairs (|x|=|y|=0.8, cos -0.9, 0, 0.9):
    # the mean must lie within 4 standard errors of exp(xᵀy) (false alarm < 1e-4 per pair).
    x, y = _pairs(6, 0.8, [-0.9, 0.0, 0.9], seed=33)
    est = _kernel_estimates(x, y, draws=4000, m=6, ortho=ortho, seed=34)
    truth = torch.exp((x * y).sum(-1))
    se = est.std(dim=0) / math.sqrt(est.shape[0])
    assert ((est.mean(0) - truth).abs() <= 4 * se).all(), (est.mean(0), truth, se)


def test_lemma2_mse_of_positive_and_trig_features():
    """Empirical MSE within 4 standard errors of Lemma 2's closed forms; positive wins where softmax is small."""
    # Seed 35/36, d=4, m=16, 4000 draws, |x| = |y| = 0.7 (small norms keep the squared errors' tails light
    # enough for their sample standard error to be trustworthy: 20 other seeds all pass this bound).
    d, m, R = 4, 16, 4000
    x, y = _pairs(d, 0.7, [-0.95, -0.5, 0.3], seed=35)
    sm = torch.exp((x * y).sum(-1))
    s2, t2 = ((x + y) ** 2).sum(-1), ((x - y) ** 2).sum(-1)
    theory = {"positive": torch.exp(s2) * sm ** 2 * (1 - torch.exp(-s2)) / m,
              "trig": torch.exp(s2) * sm ** -2 * (1 - torch.exp(-t2)) ** 2 / (2 * m)}
    mse = {}
    for kernel in ("positive", "trig"):
        sq = (_kernel_estimates(x, y, draws=R, m=m, ortho=False, kernel=kernel, seed=36) - sm) ** 2
        se = sq.std(0) / math.sqrt(R)
        mse[kernel] = sq.mean(0)
        assert ((mse[kernel] - theory[kernel]).abs() <= 4 * se).all(), (kernel, mse[kernel], theory[kernel], se)
    assert mse["trig"][0] > 20 * mse["positive"][0]  # cos = -0.95, softmax small: theory says 49x
    assert mse["trig"][2] < mse["positive"][2] / 3  # cos = +0.3, softmax large: trig is better (theory 10x)


def test_orthogonal_features_have_lower_mse():
    # Thm 3: at the same m (= d = 16) orthogonal rows strictly lower the MSE. Seed 37/38/39, 20000 draws per
    # kind, |x| = |y| = 0.7; the gap must exceed 4 standard errors of the difference of the two MSE estimates
    # (it is ~25-35% of the MSE; over 10 other seeds the smallest gap was 5.5 standard errors).
    x, y = _pairs(16, 0.7, [0.0, 0.3], seed=37)
    truth = torch.exp((x * y).sum(-1))
    R = 20000
    sq_iid = (_kernel_estimates(x, y, draws=R, m=16, ortho=False, seed=38) - truth) ** 2
    sq_ort = (_kernel_estimates(x, y, draws=R, m=16, ortho=True, seed=39) - truth) ** 2
    gap = sq_iid.mean(0) - sq_ort.mean(0)
    se = torch.sqrt(sq_iid.var(0) / R + sq_ort.var(0) / R)
    assert (gap > 4 * se).all(), (gap, se)


def test_attention_error_decreases_with_m():
    # Seed 40, 12 redraws per m, N=32 d=16, q,k ~ 0.6·N(0, I): the mean relative error of FAVOR+ vs exact
    # softmax must fall at every step of m = 8, 32, 128, 512, and by ≥ 3x overall (≈ 1/√m would give 8x).
    q, k, v = qkv(B=1, H=2, N=32, D=16, seed=40, scale=0.6)
    exact = softmax_attention(q, k, v)
    errs = []
    g = gen(41)
    for m in (8, 32, 128, 512):
        e = [float((favor_attention(q, k, v, orthogonal_gaussian(m, 16, generator=g, dtype=torch.float64))
                    - exact).norm() / exact.norm()) for _ in range(12)]
        errs.append(sum(e) / len(e))
    assert all(a > b for a, b in zip(errs, errs[1:])), errs
    assert errs[-1] < errs[0] / 3, errs


# ---- the module ------------------------------------------------------------------------------------------

def test_module_mixes_with_favor_and_shares_weights_with_exact_attention():
    torch.manual_seed(0)
    mod = PerformerSelfAttention(16, heads=2, nb_features=12).double()
    assert mod.projection.shape == (12, 8) and mod.projection.dtype == torch.float64
    x = torch.randn(2, 9, 16, generator=gen(42), dtype=torch.float64)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    q, k, v = (mod.split_heads(f(x)) for f in (mod.to_q, mod.to_k, mod.to_v))
    for causal in (False, True):
        ref = mod.to_out(mod.merge_heads(favor_attention(q, k, v, mod.projection, mask=mask, causal=causal)))
        torch.testing.assert_close(mod(x, mask=mask, causal=causal), ref, rtol=0, atol=TOL)
    exact = MultiHeadSelfAttention(16, heads=2).double()
    missing, unexpected = exact.load_state_dict(mod.state_dict(), strict=False)
    assert not missing and set(unexpected) == {"projection", "redraws", "calls"}
    assert PerformerSelfAttention(16, heads=2).nb_features == int(8 * math.log(8))  # performer-pytorch default


def test_redraw_schedule_is_deterministic_and_training_only():
    a = PerformerSelfAttention(8, heads=2, nb_features=6, redraw_interval=3, seed=5)
    b = PerformerSelfAttention(8, heads=2, nb_features=6, redraw_interval=3, seed=5)
    c = PerformerSelfAttention(8, heads=2, nb_features=6, redraw_interval=3, seed=6)
    assert torch.equal(a.projection, b.projection) and not torch.equal(a.projection, c.projection)
    x = torch.randn(1, 4, 8, generator=gen(43))
    seen = []
    for _ in range(7):
        a(x)
        seen.append(a.projection.clone())
    # calls 1-3 use draw 0, calls 4-6 draw 1, call 7 draw 2
    assert torch.equal(seen[0], seen[2]) and not torch.equal(seen[2], seen[3])
    assert torch.equal(seen[3], seen[5]) and not torch.equal(seen[5], seen[6])
    assert int(a.redraws) == 2 and int(a.calls) == 7
    for _ in range(7):  # another "rank": same seed, same calls -> same matrix, no communication
        b(x)
    assert torch.equal(a.projection, b.projection)
    a.eval()
    for _ in range(5):
        a(x)
    assert torch.equal(a.projection, seen[6]) and int(a.calls) == 7
    a.redraw(generator=gen(44))  # explicit generator
    assert torch.equal(a.projection, orthogonal_gaussian(6, 4, generator=gen(44)))
    never = PerformerSelfAttention(8, heads=2, nb_features=6)
    p0 = never.projection.clone()
    for _ in range(4):
        never(x)
    assert torch.equal(never.projection, p0)


def _rope(q, k, offset):
    """A minimal rotary embedding, enough to check that step() passes the right positions."""
    d = q.shape[-1] // 2
    pos = torch.arange(offset, offset + q.shape[2], dtype=q.dtype)[:, None]
    ang = pos * 10000 ** (-torch.arange(d, dtype=q.dtype) / d)  # (T, d/2)
    cos, sin = torch.cos(ang), torch.sin(ang)

    def rot(t):
        a, b = t[..., :d], t[..., d:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return rot(q), rot(k)


@pytest.mark.parametrize("rotary", [False, True])
def test_step_generation_equals_causal_forward(rotary):
    torch.manual_seed(1)
    mod = PerformerSelfAttention(16, heads=2, nb_features=10, chunk_size=4).double().eval()
    if rotary:
        mod.rotary = _rope
    x = torch.randn(2, 11, 16, generator=gen(45), dtype=torch.float64)
    ref = mod(x, causal=True)
    state, ys = None, []
    for t in range(11):
        y, state = mod.step(x[:, t:t + 1], state)
        ys.append(y)
    assert state.position == 11 and state.kv.shape == (2, 2, 10, 8)  # O(m·Dv) whatever the length
    torch.testing.assert_close(torch.cat(ys, 1), ref, rtol=0, atol=TOL)
    y_pre, st_pre = mod.step(x[:, :6])  # a prompt at once, then one token
    y_next, _ = mod.step(x[:, 6:7], st_pre)
    torch.testing.assert_close(torch.cat([y_pre, y_next], 1), ref[:, :7], rtol=0, atol=TOL)


# ---- performer-pytorch 1.1.4 ------------------------------------------------------------------------------

@pytest.mark.peers
@pytest.mark.parametrize("causal", [False, True])
def test_equals_performer_pytorch_fast_attention(causal):
    """Same projection, float64: equal once their two epsilons are 0; those are the only difference."""
    pytest.importorskip("performer_pytorch")
    from minilin.peers import PerformerPytorchFAVOR
    q, k, v = qkv(B=2, H=3, N=40, D=16, seed=46, scale=0.8)
    w = orthogonal_gaussian(24, 16, generator=gen(47), dtype=torch.float64)
    ours = favor_attention(q, k, v, w, causal=causal, chunk_size=16)
    theirs = PerformerPytorchFAVOR(w, causal=causal, feature_eps=0.0, denominator_eps=0.0)
    assert theirs.module.projection_matrix.dtype == torch.float64
    torch.testing.assert_close(theirs(q, k, v), ours, rtol=0, atol=TOL)
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    theirs(qq, kk, vv).square().sum().backward()
    q2, k2, v2 = (t.clone().requires_grad_(True) for t in (q, k, v))
    favor_attention(q2, k2, v2, w, causal=causal, chunk_size=16).square().sum().backward()
    for a, b in ((qq, q2), (kk, k2), (vv, v2)):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-9)
    # with their defaults (1e-4 added to every feature) the outputs move by far more than round-off
    assert (PerformerPytorchFAVOR(w, causal=causal)(q, k, v) - ours).abs().max() > 1e-4


@pytest.mark.peers
def test_self_attention_transplant_into_performer_pytorch(monkeypatch):
    """performer_self_attention_to_peer: their SelfAttention with our weights is our function (float64, outputs
    and the gradients for the input and every weight <= 1e-12) once their feature epsilon is 0; with 1e-4, as
    shipped, it is not; and a transplant that copies one wrong weight (to_q and to_k swapped) fails the check."""
    pytest.importorskip("performer_pytorch")
    from minilin import peers
    ours = PerformerSelfAttention(24, heads=3, nb_features=20, seed=50).double()
    x = qkv(B=2, H=1, N=12, D=24, seed=51)[0][:, 0]  # (2, 12, 24)

    def gaps(feature_eps):
        theirs = peers.performer_self_attention_to_peer(ours, feature_eps=feature_eps)
        assert theirs.module.fast_attention.projection_matrix.dtype == torch.float64 and len(theirs.param_pairs) == 5
        return peers.compare_with_peer(ours, theirs, [x], param_pairs=theirs.param_pairs)

    exact = gaps(0.0)
    assert max(exact.values()) <= 1e-12, exact
    assert gaps(1e-4)["output"] > 1e-6
    swapped = {**peers.PERFORMER_SELF_ATTENTION_NAMES, "to_q.weight": "to_k.weight", "to_k.weight": "to_q.weight"}
    monkeypatch.setattr(peers, "PERFORMER_SELF_ATTENTION_NAMES", swapped)
    assert gaps(0.0)["output"] > 1e-3  # the mutant transplant: the check catches it


@pytest.mark.peers
def test_performer_eps_sets_their_feature_epsilon_and_restores_it():
    """peers.performer_eps(eps): inside the block their softmax_kernel uses eps (0 and 0.5 checked against an explicit
    eps=), and on leaving it, normally or by an exception, their own function with its 1e-4 default is back."""
    pytest.importorskip("performer_pytorch")
    import performer_pytorch.performer_pytorch as pp
    from minilin import peers
    shipped = pp.softmax_kernel
    x = qkv(B=1, H=2, N=6, D=8, seed=60)[0]
    w = orthogonal_gaussian(16, 8, generator=gen(61), dtype=torch.float64)
    features = lambda fn, **eps: fn(x, projection_matrix=w, is_query=False, **eps)  # noqa: E731
    for eps in (0.0, 0.5):
        with peers.performer_eps(eps):
            assert torch.equal(features(pp.softmax_kernel), features(shipped, eps=eps))
        assert pp.softmax_kernel is shipped
    with pytest.raises(RuntimeError), peers.performer_eps(0.0):
        raise RuntimeError("leave the block by an exception")
    assert pp.softmax_kernel is shipped
    assert torch.equal(features(pp.softmax_kernel), features(shipped, eps=1e-4))
    assert (features(shipped, eps=0.0) - features(shipped)).abs().max() > 1e-6  # so the checks above can fail


@pytest.mark.peers
def test_performer_pytorch_causal_past_depends_on_future():
    """Their key stabiliser is a max over all positions (performer-pytorch#82): with their epsilon the past
    changes when the future does; ours is bit-for-bit unchanged."""
    pytest.importorskip("performer_pytorch")
    from minilin.peers import PerformerPytorchFAVOR
    q, k, v = qkv(B=1, H=2, N=24, D=16, seed=48)
    w = orthogonal_gaussian(24, 16, generator=gen(49), dtype=torch.float64)
    theirs = PerformerPytorchFAVOR(w, causal=True)
    k2 = k.clone()
    k2[:, :, -1] *= 4.0
    assert (theirs(q, k2, v)[:, :, :-1] - theirs(q, k, v)[:, :, :-1]).abs().max() > 1e-6
    assert torch.equal(favor_attention(q, k2, v, w, causal=True)[:, :, :-1],
                       favor_attention(q, k, v, w, causal=True)[:, :, :-1])
