"""Exact attention: vectorised == loop spec (property test), == PyTorch SDPA, gradients, masks, errors."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right
from hypothesis import given
from hypothesis import strategies as st

from minilin.attention import (
    MultiHeadSelfAttention,
    allowed_keys,
    attention_loops,
    attention_matrix,
    softmax_attention,
)
from minilin.probes import future_leakage, influence_matrix
from helpers import TOL, attention_inputs, qkv



attention_cases = attention_inputs  # (q, k, v, mask, causal)


@given(attention_cases())
def test_vectorised_matches_loop_spec(case):
    q, k, v, mask, causal = case
    fast = softmax_attention(q, k, v, mask=mask, causal=causal)
    slow = attention_loops(q, k, v, mask=mask, causal=causal)
    assert fast.shape == slow.shape
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, slow, rtol=0, atol=TOL)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("use_mask", [False, True])
def test_matches_sdpa_float64(causal, use_mask):
    q, k, v = qkv(B=2, H=4, N=33, D=16, seed=1)
    mask = None
    sdpa_mask = None
    if use_mask:
        # every row keeps its first key: the ordinary case (rows with no visible key and N != M are tested below)
        mask = torch.rand(2, 33, generator=torch.Generator().manual_seed(2)) > 0.3
        mask[:, 0] = True
        sdpa_mask = mask[:, None, None, :]
    if causal and use_mask:
        sdpa_mask = sdpa_mask & torch.ones(33, 33, dtype=torch.bool).tril()
        ours = softmax_attention(q, k, v, mask=mask, causal=True)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask)
    else:
        ours = softmax_attention(q, k, v, mask=mask, causal=causal)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask, is_causal=causal)
    torch.testing.assert_close(ours, ref, rtol=0, atol=TOL)


# PyTorch's SDPA returns zeros (not NaN) for a row with no visible key since its "safe softmax"
# (pytorch/pytorch#131863); torch 2.13, the course's version, has it. Before, such rows were NaN (#103963).
SDPA_ZEROS_EMPTY_ROWS = hasattr(torch.ops.aten, "_safe_softmax")
needs_safe_softmax = pytest.mark.skipif(not SDPA_ZEROS_EMPTY_ROWS,
                                        reason="this PyTorch's SDPA returns NaN for a row with no visible key")


def bottom_right(n, m):
    """minilin's causal alignment as a dense (N, M) bool mask: what causal_lower_right(n, m) materialises."""
    return torch.ones(n, m, dtype=torch.bool).tril(m - n)


def sdpa_and_ours_with_grads(q, k, v, attn_mask, **ours_kw):
    """Outputs and (q, k, v) gradients of SDPA (with attn_mask) and of softmax_attention (with ours_kw)."""
    w = torch.randn(*q.shape[:3], v.shape[-1], generator=torch.Generator().manual_seed(99), dtype=q.dtype)
    results = []
    for fn in (lambda a, b, c: softmax_attention(a, b, c, **ours_kw),
               lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=attn_mask)):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = fn(*leaves)
        results.append((out, torch.autograd.grad((out * w).sum(), leaves)))
    return results


@needs_safe_softmax
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gives_zeros_like_ours_for_rows_with_no_visible_key(dtype, causal):
    q, k, v = qkv(B=3, H=2, N=6, D=4, seed=12, dtype=dtype)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[0] = False                                          # batch 0: every key is padding
    mask[1, :2] = False                                      # batch 1: left padding (causal rows 0, 1 see nothing)
    allowed = mask[:, None, None, :] & (bottom_right(6, 6) if causal else torch.ones(6, 6, dtype=torch.bool))  # (B,1,N,M)
    empty = ~allowed.any(-1)                                 # (B, 1, N) rows with no visible key
    assert empty[0].all() and empty[1, 0, :2].all() == causal and not empty[2].any()
    (ours, g_ours), (ref, g_ref) = sdpa_and_ours_with_grads(q, k, v, allowed, mask=mask, causal=causal)
    tol = TOL if dtype == torch.float64 else 1e-5
    rows = empty.expand(-1, 2, -1)                           # (B, H, N)
    assert (ref[rows] == 0).all() and (ours[rows] == 0).all()
    assert (g_ref[0][rows] == 0).all() and (g_ours[0][rows] == 0).all()   # no gradient to a query that sees nothing
    torch.testing.assert_close(ours, ref, rtol=0, atol=tol)
    for a, b in zip(g_ours, g_ref):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a, b, rtol=0, atol=tol)


@pytest.mark.parametrize("N, M", [(5, 7), (1, 6), (4, 4), (5, 3), (6, 1)])
@pytest.mark.parametrize("use_mask", [False, True])
def test_matches_sdpa_bottom_right_causal(N, M, use_mask):
    """causal=True with N != M is SDPA with causal_lower_right(N, M) (is_causal would align top-left)."""
    if N > M and not SDPA_ZEROS_EMPTY_ROWS:
        pytest.skip("N > M leaves rows with no visible key, NaN in this PyTorch's SDPA")
    q, k, v = qkv(B=2, H=3, N=N, M=M, D=8, seed=13)
    if use_mask:
        mask = torch.rand(2, M, generator=torch.Generator().manual_seed(14)) > 0.3
        mask[:, -1] = True                                   # the last query always sees the last key
        attn_mask = mask[:, None, None, :] & bottom_right(N, M)
    else:
        mask = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)     # N > M: "will produce NaNs" (it gives zeros, tested)
            attn_mask = causal_lower_right(N, M)
    (ours, g_ours), (ref, g_ref) = sdpa_and_ours_with_grads(q, k, v, attn_mask, mask=mask, causal=True)
    assert torch.isfinite(ref).all()
    torch.testing.assert_close(ours, ref, rtol=0, atol=TOL)
    for a, b in zip(g_ours, g_ref):
        torch.testing.assert_close(a, b, rtol=0, atol=TOL)
    if N != M:                                               # the top-left alignment is a different function
        top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert not torch.allclose(top_left, ref, atol=1e-3, equal_nan=True)


def test_bottom_right_tril_is_minilins_causal_alignment():
    # torch's documentation of causal_lower_right gives this tril(M - N) as its materialised form
    for n, m in [(3, 5), (5, 3), (4, 4), (1, 7), (7, 1)]:
        assert torch.equal(bottom_right(n, m), allowed_keys(n, m, causal=True)[0, 0])


def test_attention_matrix_rows_are_distributions():
    q, k, _ = qkv(N=7, M=9, seed=3)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    p = attention_matrix(q, k, mask=mask, causal=True)
    assert p.shape == (2, 3, 7, 9)
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(2, 3, 7, dtype=p.dtype), rtol=0, atol=TOL)
    assert (p[1, :, :, 6:] == 0).all()                       # padded keys get no weight
    i, j = torch.arange(7)[:, None], torch.arange(9)[None, :]
    assert (p[..., j > i + 2] == 0).all()                    # bottom-right causal alignment (M - N = 2)


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v = qkv(N=4, seed=4)
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[0] = False                                          # batch 0: nothing to attend to
    mask[1, :2] = False                                      # batch 1: causal rows 0, 1 see no key
    for causal in (False, True):
        out = softmax_attention(q, k, v, mask=mask, causal=causal)
        assert torch.isfinite(out).all()
        assert (out[0] == 0).all()
    out = softmax_attention(q, k, v, mask=mask, causal=True)
    assert (out[1, :, :2] == 0).all() and (out[1, :, 2:] != 0).any()
    q.requires_grad_(True)
    softmax_attention(q, k, v, mask=mask, causal=True).sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[0] == 0).all()


def test_stable_for_huge_scores():
    q, k, v = qkv(N=6, seed=5, dtype=torch.float32)
    out = softmax_attention(q * 1e4, k * 1e4, v)             # scores ~1e8: naive exp overflows
    assert torch.isfinite(out).all()
    naive = torch.exp(q * 1e4 @ (k * 1e4).transpose(-2, -1) / 2)
    assert not torch.isfinite(naive).all()                   # ...which is why we subtract the max


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck(causal):
    q, k, v = (t.requires_grad_(True) for t in qkv(B=1, H=2, N=4, D=3, seed=6))
    mask = torch.tensor([[True, True, False, True]])
    assert torch.autograd.gradcheck(
        lambda q, k, v: softmax_attention(q, k, v, mask=mask, causal=causal), (q, k, v))


def test_scale_argument():
    q, k, v = qkv(seed=7)
    torch.testing.assert_close(softmax_attention(q, k, v, scale=1.0),
                               softmax_attention(q * math.sqrt(4), k, v), rtol=0, atol=TOL)


def test_leakage_probe_separates_causal_from_full():
    x = torch.randn(1, 2, 8, 4, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    assert future_leakage(lambda t: softmax_attention(t, t, t, causal=True), x, seq_dim=2, generator=g) == 0.0
    assert future_leakage(lambda t: softmax_attention(t, t, t), x, seq_dim=2, generator=g) > 1e-3
    infl = influence_matrix(lambda t: softmax_attention(t, t, t, causal=True), x, seq_dim=2, generator=g)
    assert infl.shape == (8, 8) and (infl.diagonal() > 0).all()


def test_module_matches_manual_heads_and_is_pluggable():
    torch.manual_seed(0)
    m = MultiHeadSelfAttention(dim=12, heads=3).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    q = m.to_q(x).view(2, 5, 3, 4).transpose(1, 2)
    k = m.to_k(x).view(2, 5, 3, 4).transpose(1, 2)
    v = m.to_v(x).view(2, 5, 3, 4).transpose(1, 2)
    manual = m.to_out(attention_loops(q, k, v, mask=mask, causal=True).transpose(1, 2).reshape(2, 5, 12))
    torch.testing.assert_close(m(x, mask=mask, causal=True), manual, rtol=0, atol=TOL)

    calls = []

    def spy(q, k, v, *, mask=None, causal=False):
        calls.append((q.shape, causal))
        return torch.zeros_like(v)

    class Spy(MultiHeadSelfAttention):  # the one extension point: override mix
        def mix(self, q, k, v, *, mask=None, causal=False):
            return spy(q, k, v, mask=mask, causal=causal)

    m2 = Spy(12, 3).double()
    m2.load_state_dict(m.state_dict())
    out = m2(x, causal=True)
    assert calls == [((2, 3, 5, 4), True)]
    torch.testing.assert_close(out, m.to_out.bias.expand(2, 5, 12))  # zero mix -> only the output bias

    assert future_leakage(lambda t: m(t, causal=True), x[:1], generator=torch.Generator().manual_seed(1)) == 0.0


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v: (q[0], k, v, None), r"q must have shape \(batch, heads, seq, head_dim\)"),
    (lambda q, k, v: (q, k[:, :2], v, None), r"agree on \(batch, heads\)"),
    (lambda q, k, v: (q, k[..., :3], v, None), r"q and k must share head_dim"),
    (lambda q, k, v: (q, k, v[:, :, :4], None), r"same number of positions"),
    (lambda q, k, v: (q, k.float(), v, None), r"share a dtype"),
    (lambda q, k, v: (q.long(), k.long(), v.long(), None), r"floating-point"),
    (lambda q, k, v: (q, k, v, torch.ones(2, 5)), r"mask must be a bool tensor"),
    (lambda q, k, v: (q, k, v, torch.ones(2, 4, dtype=torch.bool)), r"mask must have shape \(batch, seq\) = \(2, 5\)"),
    (lambda q, k, v: (q, k, v, torch.ones(2, 1, 1, 5, dtype=torch.bool)), r"mask must have shape"),
])
def test_errors_name_the_fix(bad, match):
    q, k, v, mask = bad(*qkv(N=5, seed=9))
    with pytest.raises(ValueError, match=match):
        softmax_attention(q, k, v, mask=mask)
    with pytest.raises(ValueError, match=match):
        attention_loops(q, k, v, mask=mask)


def test_module_errors():
    with pytest.raises(ValueError, match="not divisible by heads"):
        MultiHeadSelfAttention(dim=10, heads=3)
    m = MultiHeadSelfAttention(dim=8, heads=2)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, seq, 8\)"):
        m(torch.randn(2, 5, 6))


def test_loop_spec_gradients_match_vectorised():
    q, k, v = (t.requires_grad_(True) for t in qkv(B=1, H=2, N=4, M=5, D=3, seed=10))
    mask = torch.tensor([[True, False, True, True, True]])
    w = torch.randn(1, 2, 4, 3, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    g_fast = torch.autograd.grad((softmax_attention(q, k, v, mask=mask, causal=True) * w).sum(), (q, k, v))
    g_slow = torch.autograd.grad((attention_loops(q, k, v, mask=mask, causal=True) * w).sum(), (q, k, v))
    for a, b in zip(g_fast, g_slow):
        torch.testing.assert_close(a, b, rtol=0, atol=TOL)
