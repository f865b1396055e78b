"""Efficient attention (Shen et al., arXiv 1812.01243): vectorised == loop spec, masks, causal scan, module."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from minilin.efficient import (
    EfficientSelfAttention,
    efficient_attention,
    efficient_attention_loops,
    fit_previous_token,
    key_softmax,
    visible_counts,
)
from minilin.probes import future_leakage, influence_matrix
from helpers import TOL, attention_inputs, qkv

pytestmark = pytest.mark.usefixtures("one_thread")


@st.composite
def cases(draw):
    q, k, v, mask, causal = draw(attention_inputs(max_heads=2, max_d=4, max_dv=3))
    bucket = draw(st.sampled_from([None, 1, 2, 3])) if causal else None
    return q, k, v, mask, causal, bucket, draw(st.integers(1, 4))


@given(cases())
def test_vectorised_matches_loop_spec(case):
    q, k, v, mask, causal, bucket, chunk = case
    fast = efficient_attention(q, k, v, mask=mask, causal=causal, bucket_size=bucket, chunk_size=chunk)
    slow = efficient_attention_loops(q, k, v, mask=mask, causal=causal, bucket_size=bucket)
    assert fast.shape == slow.shape == (*q.shape[:3], v.shape[-1])
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, slow, rtol=0, atol=TOL)


@pytest.mark.parametrize("causal, bucket", [(False, None), (True, None), (True, 2)])
def test_loop_spec_gradients_match_vectorised(causal, bucket):
    q, k, v = (t.requires_grad_(True) for t in qkv(B=1, H=2, N=5, M=6, D=3, seed=1))
    mask = torch.tensor([[True, False, True, True, True, True]])
    w = torch.randn(1, 2, 5, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    fast = efficient_attention(q, k, v, mask=mask, causal=causal, bucket_size=bucket, chunk_size=2)
    slow = efficient_attention_loops(q, k, v, mask=mask, causal=causal, bucket_size=bucket)
    for a, b in zip(torch.autograd.grad((fast * w).sum(), (q, k, v)), torch.autograd.grad((slow * w).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=0, atol=TOL)


@pytest.mark.parametrize("causal, bucket", [(False, None), (True, None), (True, 3)])
def test_gradcheck(causal, bucket):
    q, k, v = (t.requires_grad_(True) for t in qkv(B=1, H=2, N=7, D=3, seed=3))
    mask = torch.tensor([[True, True, False, True, True, True, False]])
    assert torch.autograd.gradcheck(
        lambda q, k, v: efficient_attention(q, k, v, mask=mask, causal=causal, bucket_size=bucket, chunk_size=3),
        (q, k, v))


def implied_attention(q, k, **kw):
    """The (B, H, N, M) matrix A with efficient_attention(q, k, v) = A v: feed the identity as v."""
    B, H, M = k.shape[0], k.shape[1], k.shape[2]
    eye = torch.eye(M, dtype=k.dtype).expand(B, H, M, M)
    return efficient_attention(q, k, eye, **kw)


def test_non_causal_is_paper_equation_3():
    q, k, v = qkv(N=5, M=7, Dv=3, seed=4)
    expected = torch.softmax(q, dim=-1) @ (torch.softmax(k, dim=-2).transpose(-2, -1) @ v)  # Shen et al. eq. (3)
    torch.testing.assert_close(efficient_attention(q, k, v), expected, rtol=0, atol=TOL)
    A = implied_attention(q, k)
    assert (A >= 0).all()
    torch.testing.assert_close(A.sum(-1), torch.ones(2, 3, 5, dtype=A.dtype), rtol=0, atol=TOL)
    assert torch.linalg.matrix_rank(A[0, 0]) <= 4  # rank <= D: a low-rank attention matrix, never built


def test_masked_keys_get_no_weight_and_rows_stay_distributions():
    q, k, _ = qkv(N=6, M=6, seed=5)
    mask = torch.tensor([[True] * 6, [True, True, True, True, False, False]])
    for causal, bucket in ((False, None), (True, None), (True, 2)):
        A = implied_attention(q, k, mask=mask, causal=causal, bucket_size=bucket)
        assert (A[1, :, :, 4:] == 0).all()
        counts = visible_counts(6, 6, causal=causal, bucket_size=bucket)
        j = torch.arange(6)
        assert (A[..., j[None, :] >= counts[:, None]] == 0).all()  # nothing beyond the visible prefix
        sees_something = counts > 0
        sums = A.sum(-1)[..., sees_something]
        torch.testing.assert_close(sums, torch.ones_like(sums), rtol=0, atol=TOL)
    # the padded positions' k and v may be anything: the real tokens' outputs do not change
    q, k, v = qkv(N=6, seed=6)
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 4:] += 100.0
    v2[1, :, 4:] = -7.0
    for causal in (False, True):
        torch.testing.assert_close(efficient_attention(q, k, v, mask=mask, causal=causal),
                                   efficient_attention(q, k2, v2, mask=mask, causal=causal), rtol=0, atol=TOL)


def test_bucketed_blind_spot():
    counts = visible_counts(8, 8, causal=True, bucket_size=3)
    assert counts.tolist() == [0, 0, 0, 3, 3, 3, 6, 6]  # buckets {0,1,2}, {3,4,5}, {6,7}: earlier buckets only
    assert visible_counts(3, 8, causal=True, bucket_size=3).tolist() == [3, 6, 6]  # bottom-right: keys 5, 6, 7
    assert visible_counts(4, 4, causal=True, bucket_size=None).tolist() == [1, 2, 3, 4]
    q, k, v = qkv(N=8, seed=7)
    out = efficient_attention(q, k, v, causal=True, bucket_size=3)
    assert (out[:, :, :3] == 0).all()  # the first bucket sees no key at all


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v = qkv(N=5, seed=8)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[0] = False  # batch 0: nothing to attend to
    mask[1, :2] = False  # batch 1, causal: queries 0, 1 see only padding
    for causal in (False, True):
        out = efficient_attention(q, k, v, mask=mask, causal=causal)
        assert torch.isfinite(out).all() and (out[0] == 0).all()
    out = efficient_attention(q, k, v, mask=mask, causal=True)
    assert (out[1, :, :2] == 0).all() and (out[1, :, 2:] != 0).any()
    q.requires_grad_(True)
    k.requires_grad_(True)
    efficient_attention(q, k, v, mask=mask, causal=True).sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all() and (q.grad[0] == 0).all()


def test_causal_is_a_different_kernel_not_a_masked_copy():
    # The last query sees every key, yet its causal output differs from the non-causal one: causal
    # normalises once per query (linear attention with exp(k) features), non-causal once per feature.
    q, k, v = qkv(N=6, seed=9)
    causal, full = efficient_attention(q, k, v, causal=True), efficient_attention(q, k, v)
    assert (causal[:, :, -1] - full[:, :, -1]).abs().max() > 1e-2
    phi_q, phi_k = torch.softmax(q, -1), torch.exp(k)
    w = phi_q @ phi_k.transpose(-2, -1)  # (B, H, N, M)
    w = w.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), 0.0)
    torch.testing.assert_close(causal, (w / w.sum(-1, keepdim=True)) @ v, rtol=0, atol=TOL)


@pytest.mark.parametrize("bucket", [None, 3])
def test_chunk_size_does_not_change_the_result(bucket):
    q, k, v = qkv(N=11, M=13, seed=10)
    mask = torch.rand(2, 13, generator=torch.Generator().manual_seed(11)) > 0.3
    ref = efficient_attention(q, k, v, mask=mask, causal=True, bucket_size=bucket, chunk_size=11)
    for chunk in (1, 2, 4, 64):
        out = efficient_attention(q, k, v, mask=mask, causal=True, bucket_size=bucket, chunk_size=chunk)
        torch.testing.assert_close(out, ref, rtol=0, atol=TOL)


def test_causal_scan_is_stable_where_exp_overflows():
    # keys ~ 100 * N(0, 1): exp(k) is inf in float32 (and the naive ratio NaN); the scan never forms exp(k)
    q, k, v = qkv(N=9, seed=12, dtype=torch.float32)
    k = k * 100.0
    assert not torch.isfinite(torch.exp(k)).all()
    for causal in (False, True):
        out32 = efficient_attention(q, k, v, causal=causal, chunk_size=4)
        out64 = efficient_attention(q.double(), k.double(), v.double(), causal=causal, chunk_size=4)
        assert torch.isfinite(out32).all()
        torch.testing.assert_close(out32.double(), out64, rtol=0, atol=1e-5)  # float32 eps ~1e-7, O(1) outputs
    # shifting every key by a constant leaves causal efficient attention unchanged (the factor cancels)
    q, k, v = qkv(N=9, seed=13)
    for shift in (-50.0, 50.0):
        torch.testing.assert_close(efficient_attention(q, k + shift, v, causal=True),
                                   efficient_attention(q, k, v, causal=True), rtol=0, atol=TOL)


@pytest.mark.parametrize("bucket", [None, 3])
def test_changing_the_future_leaves_the_past_bit_identical(bucket):
    # The gradient probe cannot see through the detached running maxima, so check the values directly:
    # replace every key/value from position 7 on (huge keys, to move any max) and compare the past outputs.
    q, k, v = qkv(N=12, seed=17)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 7:] = 60.0 * qkv(N=5, seed=18)[1]
    v2[:, :, 7:] = -3.0
    for chunk in (1, 4, 64):
        a = efficient_attention(q, k, v, causal=True, bucket_size=bucket, chunk_size=chunk)
        b = efficient_attention(q, k2, v2, causal=True, bucket_size=bucket, chunk_size=chunk)
        assert torch.equal(a[:, :, :7], b[:, :, :7])
        assert (a[:, :, 7:] - b[:, :, 7:]).abs().max() > 1e-3


@pytest.mark.parametrize("bucket", [None, 2])
def test_causal_scan_does_not_leak_the_future(bucket):
    x = torch.randn(1, 2, 8, 4, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    fn = lambda t: efficient_attention(t, t * 2.0, t, causal=True, bucket_size=bucket, chunk_size=3)  # noqa: E731
    assert future_leakage(fn, x, seq_dim=2, generator=g) == 0.0
    assert future_leakage(lambda t: efficient_attention(t, t * 2.0, t), x, seq_dim=2, generator=g) > 1e-3
    if bucket == 2:
        infl = influence_matrix(lambda t: efficient_attention(t.detach(), t, t, causal=True, bucket_size=2), x,
                                seq_dim=2, generator=g)  # keys/values only: output i uses keys of earlier buckets
        assert (infl[1, 1] == 0) and (infl[3, 2] == 0) and (infl[2, 1] > 0)


def test_key_softmax_columns():
    _, k, _ = qkv(M=5, seed=15)
    mask = torch.tensor([[True, False, True, True, False], [False] * 5])
    p = key_softmax(k, mask)
    assert (p[0, :, [1, 4]] == 0).all() and (p[1] == 0).all()
    torch.testing.assert_close(p[0].sum(-2), torch.ones(3, 4, dtype=p.dtype), rtol=0, atol=TOL)


def test_module_matches_manual_heads():
    torch.manual_seed(0)
    m = EfficientSelfAttention(dim=12, heads=3, bucket_size=2, chunk_size=2).double()
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    q, k, v = (f(x).view(2, 6, 3, 4).transpose(1, 2) for f in (m.to_q, m.to_k, m.to_v))
    for causal in (False, True):
        spec = efficient_attention_loops(q, k, v, mask=mask, causal=causal, bucket_size=2 if causal else None)
        manual = m.to_out(spec.transpose(1, 2).reshape(2, 6, 12))
        torch.testing.assert_close(m(x, mask=mask, causal=causal), manual, rtol=0, atol=TOL)
    assert future_leakage(lambda t: m(t, causal=True), x[:1], generator=torch.Generator().manual_seed(1)) == 0.0


def test_errors_name_the_fix():
    q, k, v = qkv(seed=16)
    with pytest.raises(ValueError, match="bucket_size only applies to causal=True"):
        efficient_attention(q, k, v, bucket_size=4)
    with pytest.raises(ValueError, match="bucket_size must be None or a positive int"):
        efficient_attention(q, k, v, causal=True, bucket_size=0)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        efficient_attention(q, k, v, causal=True, chunk_size=0)
    with pytest.raises(ValueError, match=r"q must have shape \(batch, heads, seq, head_dim\)"):
        efficient_attention(q[0], k, v)
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        efficient_attention(q, k, v, mask=torch.ones(2, 6))
    with pytest.raises(ValueError, match="bucket_size must be None or a positive int"):
        EfficientSelfAttention(8, heads=2, bucket_size=-1)


def test_fit_previous_token_reaches_the_bound():
    # the mean weight on the previous token is at most D/(N-1) for any Q, K; training gets within 1% of it
    N, D = 24, 8
    eye = torch.eye(N, dtype=torch.float64)[None, None]
    prev = lambda q, k: efficient_attention(q, k, eye)[0, 0].diagonal(-1).mean().item()
    trained, untrained = prev(*fit_previous_token(N, D, seed=0)), prev(*qkv(B=1, H=1, N=N, D=D, seed=0)[:2])
    assert 0.99 * D / (N - 1) < trained <= D / (N - 1) + 1e-12
    assert untrained < 0.5 * D / (N - 1)  # the untrained Q, K are far from it
