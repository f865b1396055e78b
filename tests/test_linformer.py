"""Linformer: exact when E = F = I, == a loop spec, masks, short sequences, sharing, init scale, errors, leakage."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as Fn
from hypothesis import given
from hypothesis import strategies as st

from minilin.attention import MultiHeadSelfAttention, attention_loops, softmax_attention
from minilin.linformer import (
    INITS,
    PROJECTIONS,
    SHARING,
    LinformerSelfAttention,
    conv_matrix,
    init_projection_,
    linformer_attention,
    mean_pool_matrix,
    projection_matrix_count,
    projection_parameter_count,
)
from minilin.probes import future_leakage
from helpers import TOL, qkv, rand

f64 = torch.float64


def linformer_loops(q, k, v, E, F, mask=None):
    """Spec: project with explicit sums over positions, then the loop spec of exact attention."""
    B, H, M, _ = k.shape
    kk = E.shape[-2]
    Eh = E[..., :M].expand(H, kk, M) if E.ndim == 2 else E[..., :M]
    Fh = F[..., :M].expand(H, kk, M) if F.ndim == 2 else F[..., :M]
    out = torch.zeros(B, H, q.shape[2], v.shape[-1], dtype=v.dtype)
    for b in range(B):
        for h in range(H):
            kp, vp = [], []
            for j in range(kk):
                real = [i for i in range(M) if mask is None or mask[b, i]]
                if all(Eh[h, j, i] == 0 and Fh[h, j, i] == 0 for i in real):
                    continue  # a slot that no real position feeds is not a key
                kp.append(sum(Eh[h, j, i] * k[b, h, i] for i in real))
                vp.append(sum(Fh[h, j, i] * v[b, h, i] for i in real))
            if kp:  # no slot at all: the output row stays zero, like a fully-masked exact attention row
                out[b, h] = attention_loops(q[b:b + 1, h:h + 1], torch.stack(kp)[None, None],
                                            torch.stack(vp)[None, None])[0, 0]
    return out


@st.composite
def linformer_cases(draw):
    B, H = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    N, M = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    seq_len = M + draw(st.integers(0, 3))  # sequences shorter than seq_len slice E/F
    kk, D = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    per_head_E, per_head_F = draw(st.booleans()), draw(st.booleans())  # mixed shapes are allowed too
    use_mask = draw(st.booleans())
    bits = draw(st.lists(st.booleans(), min_size=B * M, max_size=B * M))
    seed = draw(st.integers(0, 2**16))
    q, k, v = qkv(B, H, N, M, D, seed=seed)
    E = rand(*((H,) if per_head_E else ()), kk, seq_len, seed=seed + 3)
    F = rand(*((H,) if per_head_F else ()), kk, M + draw(st.integers(0, 3)), seed=seed + 4)  # its own seq_len
    if draw(st.booleans()):  # sparse 0/1 projections (identity- or pooling-like) leave some slots empty
        E, F = (E > 0.5).to(f64), (F > 0.5).to(f64) if draw(st.booleans()) else (E > 0.5).to(f64)
    mask = torch.tensor(bits).view(B, M) if use_mask else None
    return q, k, v, E, F, mask


@given(linformer_cases())
def test_matches_loop_spec(case):
    q, k, v, E, F, mask = case
    got = linformer_attention(q, k, v, E, F, mask=mask)
    assert got.shape == q.shape[:3] + v.shape[-1:]
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, linformer_loops(q, k, v, E, F, mask), rtol=0, atol=TOL)


@pytest.mark.parametrize("per_head", [False, True])
def test_identity_projection_is_exact_attention(per_head):
    q, k, v = qkv(N=7, D=5, seed=10)
    mask = torch.tensor([[True] * 7, [True, False, True, True, False, True, True]])
    I = torch.eye(7, dtype=f64)
    if per_head:
        I = I.expand(3, 7, 7)
    for m in (None, mask):
        torch.testing.assert_close(linformer_attention(q, k, v, I, I, mask=m),
                                   softmax_attention(q, k, v, mask=m), rtol=0, atol=TOL)


def test_a_permutation_is_also_exact_but_a_generic_E_is_not():
    # attention is a sum over keys, so reordering keys and values together changes nothing ...
    q, k, v = qkv(N=6, seed=11)
    perm = torch.eye(6, dtype=f64)[torch.randperm(6, generator=torch.Generator().manual_seed(0))]
    torch.testing.assert_close(linformer_attention(q, k, v, perm, perm), softmax_attention(q, k, v),
                               rtol=0, atol=TOL)
    # ... while any other square E changes the model: Linformer is not an approximation for free
    E = rand(6, 6, seed=12) / math.sqrt(6)
    assert (linformer_attention(q, k, v, E, E) - softmax_attention(q, k, v)).abs().max() > 1e-2


def test_module_with_identity_E_F_equals_exact_module():
    torch.manual_seed(0)
    exact = MultiHeadSelfAttention(16, heads=4).double()
    lin = LinformerSelfAttention(16, heads=4, seq_len=9, proj_len=9, sharing="none").double()
    missing, unexpected = lin.load_state_dict(exact.state_dict(), strict=False)
    assert set(missing) == {"E", "F"} and not unexpected  # the shared projections transplant by name
    with torch.no_grad():
        lin.E.copy_(torch.eye(9).expand(4, 9, 9))
        lin.F.copy_(torch.eye(9).expand(4, 9, 9))
    x = rand(2, 9, 16, seed=13)
    torch.testing.assert_close(lin(x), exact(x), rtol=0, atol=TOL)


def test_per_head_E_acts_on_its_own_head_only():
    q, k, v = qkv(H=3, N=5, seed=14)
    E, F = rand(3, 2, 5, seed=15), rand(3, 2, 5, seed=16)
    out = linformer_attention(q, k, v, E, F)
    for h in range(3):
        one = linformer_attention(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1], E[h], F[h])
        torch.testing.assert_close(out[:, h:h + 1], one, rtol=0, atol=TOL)


def test_padding_is_removed_before_projection():
    q, k, v = qkv(N=6, seed=20)
    E, F = rand(3, 8, seed=21), rand(3, 8, seed=22)
    mask = torch.tensor([[True, True, True, True, False, False], [True, False, True, False, True, True]])
    ref = linformer_attention(q, k, v, E, F, mask=mask)
    # anything at padded positions, even NaN/inf, cannot reach the output
    k2, v2 = k.clone(), v.clone()
    k2[~mask[:, None, :, None].expand_as(k)] = float("nan")
    v2[~mask[:, None, :, None].expand_as(v)] = float("inf")
    torch.testing.assert_close(linformer_attention(q, k2, v2, E, F, mask=mask), ref, rtol=0, atol=TOL)
    # without the mask the padded positions do change the projected slots
    assert (linformer_attention(q, k, v, E, F) - ref).abs().max() > 1e-3
    # and the gradient reaching padded keys/values is exactly zero
    k3, v3 = k.clone().requires_grad_(), v.clone().requires_grad_()
    linformer_attention(q, k3, v3, E, F, mask=mask).square().sum().backward()
    pad = ~mask[:, None, :, None].expand_as(k)
    assert (k3.grad[pad] == 0).all() and (v3.grad[pad] == 0).all()
    assert (k3.grad[~pad] != 0).any()


def test_fully_padded_sequence_gives_zeros_not_nan():
    q, k, v = qkv(N=4, seed=23)
    mask = torch.tensor([[False] * 4, [True, True, False, False]])
    out = linformer_attention(q, k, v, rand(2, 4, seed=24), rand(2, 4, seed=25), mask=mask)
    assert torch.isfinite(out).all() and (out[0] == 0).all() and (out[1] != 0).any()


def test_trailing_padding_equals_the_shorter_sequence():
    # a sequence of length 4 padded to 6 gives the same output (on its real queries) as the unpadded one,
    # because E/F are sliced to the first columns and the padded columns are zeroed
    torch.manual_seed(1)
    m = LinformerSelfAttention(12, heads=3, seq_len=8, proj_len=3).double()
    x = rand(1, 6, 12, seed=26)
    mask = torch.tensor([[True] * 4 + [False] * 2])
    torch.testing.assert_close(m(x, mask=mask)[:, :4], m(x[:, :4]), rtol=0, atol=TOL)


@pytest.mark.parametrize("sharing", SHARING)
@pytest.mark.parametrize("projection", PROJECTIONS)
def test_module_short_sequences_use_first_columns(sharing, projection):
    torch.manual_seed(2)
    m = LinformerSelfAttention(12, heads=3, seq_len=8, proj_len=4, sharing=sharing, projection=projection).double()
    x = rand(2, 5, 12, seed=27)
    E, F = m.projections(8)
    assert E.shape[-2:] == (4, 8)
    q, k, v = (m.split_heads(f(x)) for f in (m.to_q, m.to_k, m.to_v))
    expect = m.to_out(m.merge_heads(linformer_attention(q, k, v, E[..., :5], F[..., :5])))
    torch.testing.assert_close(m(x), expect, rtol=0, atol=TOL)


def test_sharing_modes_store_what_the_paper_says():
    torch.manual_seed(3)
    mods = {s: LinformerSelfAttention(12, heads=3, seq_len=8, proj_len=2, sharing=s) for s in SHARING}
    assert mods["none"].E.shape == (3, 2, 8) and mods["none"].F.shape == (3, 2, 8)
    assert mods["headwise"].E.shape == (2, 8) and mods["headwise"].F.shape == (2, 8)
    for s in ("kv", "layerwise"):
        E, F = mods[s].projections(8)
        assert mods[s].F is None and F.data_ptr() == E.data_ptr() and torch.equal(E, F)
    first = mods["layerwise"]
    second = LinformerSelfAttention(12, heads=3, seq_len=8, proj_len=2, sharing="layerwise", E=first.E)
    assert second.E is first.E
    # one parameter, gradients from both layers accumulate into it
    x = torch.randn(1, 8, 12)
    (second(first(x)).sum()).backward()
    g_both = first.E.grad.clone()
    first.E.grad = None
    first(x).sum().backward()
    assert not torch.allclose(g_both, first.E.grad)


def test_paper_matrix_counts():
    # paper sec. 4: a 12-layer, 12-head model stores 24 (headwise), 12 (key-value) or 1 (layerwise) matrices
    counts = {s: projection_matrix_count(s, layers=12, heads=12) for s in SHARING}
    assert counts == {"none": 288, "headwise": 24, "kv": 12, "layerwise": 1}


@pytest.mark.parametrize("sharing", SHARING)
@pytest.mark.parametrize("projection", PROJECTIONS)
def test_parameter_count_helper_matches_a_built_stack(sharing, projection):
    layers, heads, seq_len, k = 3, 4, 16, 4
    stack = nn.ModuleList()
    for _ in range(layers):
        E = stack[0].E if (sharing == "layerwise" and projection != "mean" and len(stack)) else None
        stack.append(LinformerSelfAttention(16, heads=heads, seq_len=seq_len, proj_len=k, sharing=sharing,
                                            projection=projection, E=E))
    # named_parameters() lists a shared parameter once, as an optimizer sees it
    counted = sum(p.numel() for n, p in stack.named_parameters() if n.split(".")[-1] in ("E", "F"))
    assert counted == projection_parameter_count(sharing, layers=layers, heads=heads, seq_len=seq_len, proj_len=k,
                                                 projection=projection)


def test_mean_and_conv_projections_are_pooling_and_strided_conv():
    x = rand(2, 5, 12, seed=30)  # (batch, channels, seq)
    torch.testing.assert_close(x @ mean_pool_matrix(4, 12, dtype=f64).T, Fn.avg_pool1d(x, 3), rtol=0, atol=TOL)
    kernel = rand(3, seed=31)
    conv = Fn.conv1d(x.reshape(10, 1, 12), kernel.view(1, 1, 3), stride=3).view(2, 5, 4)
    torch.testing.assert_close(x @ conv_matrix(kernel, 4).T, conv, rtol=0, atol=TOL)
    per_head = rand(2, 3, seed=32)
    assert conv_matrix(per_head, 4).shape == (2, 4, 12)
    torch.testing.assert_close(conv_matrix(per_head, 4)[1], conv_matrix(per_head[1], 4), rtol=0, atol=0)


@pytest.mark.parametrize("scheme, ratio", [("fan_in", lambda n, k: 1.0), ("xavier", lambda n, k: 2 * n / (n + k)),
                                           ("kaiming", lambda n, k: 2.0), ("jl", lambda n, k: n / k),
                                           ("peer", lambda n, k: n / (3 * k))])
def test_init_scales_projected_keys_as_documented(scheme, ratio):
    # seed 0; 64 draws of E (k=16, n=256) applied to unit-variance keys (n x 64). The ratio
    # Var(E K) / Var(K) is estimated from 64*16*64 = 65536 products; with independent draws its relative
    # standard error is ~sqrt(2/16384) < 2% (slots within a draw are correlated through K), so a 10% band is
    # > 5 standard errors wide and still separates every pair of schemes (1, 1.88, 2, 16, 5.3).
    g = torch.Generator().manual_seed(0)
    n, k = 256, 16
    keys = torch.randn(n, 64, generator=g, dtype=f64)
    E = torch.empty(64, k, n, dtype=f64)
    init_projection_(E, scheme, generator=g)
    measured = (E @ keys).var().item() / keys.var().item()
    assert abs(measured / ratio(n, k) - 1) < 0.10
    assert scheme in INITS


def test_init_is_deterministic_given_a_generator():
    a = LinformerSelfAttention(8, heads=2, seq_len=6, proj_len=2, generator=torch.Generator().manual_seed(5))
    b = LinformerSelfAttention(8, heads=2, seq_len=6, proj_len=2, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.E, b.E) and torch.equal(a.F, b.F) and not torch.equal(a.E, a.F)


def test_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in qkv(B=1, H=2, N=3, D=2, seed=40))
    E, F = rand(2, 2, 4, seed=41).requires_grad_(), rand(2, 4, seed=42).requires_grad_()
    mask = torch.tensor([[True, False, True]])
    assert torch.autograd.gradcheck(lambda *a: linformer_attention(*a, mask=mask), (q, k, v, E, F))


def test_leakage_probe_detects_linformer_and_passes_exact_causal():
    torch.manual_seed(4)
    x = rand(1, 6, 8, seed=50)
    lin = LinformerSelfAttention(8, heads=2, seq_len=6, proj_len=3).double()
    exact = MultiHeadSelfAttention(8, heads=2).double()
    g = torch.Generator().manual_seed(0)
    assert future_leakage(lambda t: lin(t), x, generator=g) > 1e-3
    assert future_leakage(lambda t: exact(t, causal=True), x, generator=g) == 0.0
    assert future_leakage(lambda t: exact(t), x, generator=g) > 1e-3


# ---- every error message ----

def test_error_causal():
    q, k, v = qkv(seed=60)
    E = rand(2, 6, seed=61)
    with pytest.raises(ValueError, match=r"cannot be causal.*future.*favor_attention"):
        linformer_attention(q, k, v, E, E, causal=True)
    m = LinformerSelfAttention(8, heads=2, seq_len=6, proj_len=2)
    with pytest.raises(ValueError, match=r"cannot be causal: E and F mix all n positions"):
        m(torch.randn(1, 6, 8), causal=True)


@pytest.mark.parametrize("projection", ["mean", "conv"])
def test_error_causal_pooling_names_the_window(projection):
    # a pooled slot mixes one window, not all n positions: the message says so, and what a slot mask would cost
    m = LinformerSelfAttention(8, heads=2, seq_len=6, proj_len=2, projection=projection)
    with pytest.raises(ValueError, match=rf"{projection} pooling cannot be causal.*one window.*own window.*favor_attention") as err:
        m(torch.randn(1, 6, 8), causal=True)
    assert "all n positions" not in str(err.value)


def test_error_too_long():
    q, k, v = qkv(N=6, seed=62)
    with pytest.raises(ValueError, match=r"6 positions but E covers only seq_len=5.*seq_len >= 6"):
        linformer_attention(q, k, v, rand(2, 5, seed=63), rand(2, 5, seed=64))
    m = LinformerSelfAttention(8, heads=2, seq_len=4, proj_len=2)
    with pytest.raises(ValueError, match=r"sequence length 5 exceeds this Linformer's seq_len=4.*seq_len >= 5"):
        m(torch.randn(1, 5, 8))


@pytest.mark.parametrize("E, F, pattern", [
    ("not a tensor", None, r"must be a torch.Tensor"),
    (torch.zeros(2, dtype=f64), None, r"E must have shape \(k, seq_len\).*got \(2,\) \(1-D\)"),
    (torch.zeros(2, 2, 2, 6, dtype=f64), None, r"4-D"),
    (torch.zeros(5, 2, 6, dtype=f64), None, r"E has 5 per-head matrices but q/k/v have 3 heads"),
    (torch.zeros(2, 6, dtype=f64), torch.zeros(3, 6, dtype=f64), r"same number of slots k: E has 2 rows, F has 3"),
    (torch.zeros(2, 6, dtype=torch.float32), None, r"E is torch.float32.*q/k/v are torch.float64.*\.to\(q\)"),
])
def test_error_bad_projection(E, F, pattern):
    q, k, v = qkv(seed=65)
    F = torch.zeros(2, 6, dtype=f64) if F is None else F
    with pytest.raises((ValueError, TypeError), match=pattern):
        linformer_attention(q, k, v, E, F)


def test_error_bad_inputs_use_the_shared_checks():
    q, k, v = qkv(seed=66)
    E = rand(2, 6, seed=67)
    with pytest.raises(ValueError, match=r"mask must be a bool tensor"):
        linformer_attention(q, k, v, E, E, mask=torch.ones(2, 6))
    with pytest.raises(ValueError, match=r"must have shape \(batch, heads, seq, head_dim\)"):
        linformer_attention(q[0], k, v, E, E)


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(sharing="rows"), r"unknown sharing 'rows'; choose one of"),
    (dict(projection="max"), r"unknown projection 'max'; choose one of"),
    (dict(init="orthogonal"), r"unknown init 'orthogonal'; choose one of"),
    (dict(proj_len=0), r"proj_len and seq_len must be positive ints"),
    (dict(proj_len=3, projection="mean"), r"divisible by proj_len; got seq_len=8, proj_len=3"),
    (dict(proj_len=3, projection="conv"), r"divisible by proj_len"),
    (dict(E=nn.Parameter(torch.zeros(2, 8))), r"only for sharing='layerwise'"),
    (dict(sharing="layerwise", E=nn.Parameter(torch.zeros(3, 8))), r"shared E must be an nn.Parameter of shape \(2, 8\)"),
    (dict(sharing="layerwise", E=torch.zeros(2, 8)), r"nn.Parameter"),
    (dict(sharing="layerwise", projection="mean", E=nn.Parameter(torch.zeros(2, 8))), r"no learned E to share"),
])
def test_error_bad_module_arguments(kwargs, pattern):
    args = dict(dim=8, heads=2, seq_len=8, proj_len=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=pattern):
        LinformerSelfAttention(**args)


def test_error_counts():
    with pytest.raises(ValueError, match=r"unknown sharing 'all'"):
        projection_matrix_count("all", layers=1, heads=1)
    with pytest.raises(ValueError, match=r"mean pooling needs seq_len divisible by proj_len"):
        mean_pool_matrix(3, 8)


# ---- equivalence with the `linformer` package (0.2.3) by weight transplant ----

def _peer_case(peer, ours, n, seed):
    """Outputs and all gradients of both modules on the same float64 input of length n (<= seq_len)."""
    from minilin.peers import linformer_grads_in_peer_layout
    x = rand(2, n, peer.to_q.in_features, seed=seed)
    w = rand(2, n, peer.to_q.in_features, seed=seed + 1)  # a random cotangent: no symmetry can hide an error
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    outs = [peer(xs[0]), ours(xs[1])]
    for out in outs:
        (out * w).sum().backward()
    errors = {"output": (outs[0] - outs[1]).abs().max().item(), "x.grad": (xs[0].grad - xs[1].grad).abs().max().item()}
    ours_grads = linformer_grads_in_peer_layout(ours)
    peer_grads = dict(peer.named_parameters())
    assert set(ours_grads) == set(peer_grads)
    for name, g in ours_grads.items():
        errors[name] = (peer_grads[name].grad - g).abs().max().item()
    return errors


@pytest.mark.peers
@pytest.mark.parametrize("share_kv", [False, True])
@pytest.mark.parametrize("n", [16, 11])  # full length, and shorter than seq_len (E/F sliced in both)
def test_peer_to_ours(share_kv, n):
    from linformer import LinformerSelfAttention as Peer

    from minilin.peers import linformer_from_peer
    torch.manual_seed(7)
    peer = Peer(24, seq_len=16, k=5, heads=3, share_kv=share_kv).double()
    with torch.no_grad():
        peer.to_out.bias.normal_()  # a non-zero bias, so a dropped bias cannot pass
    ours = linformer_from_peer(peer)
    assert ours.sharing == ("kv" if share_kv else "headwise") and ours.E.dtype == f64
    errors = _peer_case(peer, ours, n, seed=70)
    # float64: the two modules sum the same products in different orders; 1e-10 is ~1e5 ulps of slack
    assert max(errors.values()) <= TOL, errors


@pytest.mark.peers
@pytest.mark.parametrize("sharing", ["headwise", "kv", "layerwise"])
@pytest.mark.parametrize("n", [16, 9])
def test_ours_to_peer(sharing, n):
    from minilin.peers import linformer_to_peer
    torch.manual_seed(8)
    ours = LinformerSelfAttention(24, heads=4, seq_len=16, proj_len=6, sharing=sharing).double()
    if sharing != "headwise":
        with torch.no_grad():
            ours.to_v.weight.copy_(ours.to_k.weight)  # the peer's share_kv also ties values to keys
    peer = linformer_to_peer(ours)
    assert peer.share_kv == (sharing != "headwise")
    errors = _peer_case(peer, ours, n, seed=71)
    assert max(errors.values()) <= TOL, errors


@pytest.mark.peers
def test_peer_transplant_refuses_what_the_peer_cannot_express():
    from linformer import LinformerSelfAttention as Peer

    from minilin.peers import linformer_from_peer, linformer_to_peer
    cases = [(dict(sharing="none"), r"sharing='none'.*no counterpart"),
             (dict(projection="mean"), r"only has linear E/F"),
             (dict(bias=True), r"no bias"),
             (dict(sharing="kv"), r"uses the keys as values.*to_v.weight")]
    for kwargs, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            linformer_to_peer(LinformerSelfAttention(8, heads=2, seq_len=8, proj_len=2, **kwargs))
    with pytest.raises(ValueError, match=r"one_kv_head=True.*no counterpart"):
        linformer_from_peer(Peer(8, seq_len=8, k=2, heads=2, one_kv_head=True))


@pytest.mark.peers
def test_peer_transplant_leaves_the_global_rng_alone():
    from minilin.peers import linformer_to_peer
    ours = LinformerSelfAttention(8, heads=2, seq_len=8, proj_len=2)
    torch.manual_seed(9)
    expected = torch.rand(3)
    torch.manual_seed(9)
    linformer_to_peer(ours)
    assert torch.equal(torch.rand(3), expected)
