"""linear-attention-transformer 0.19.1 against minilin, by weight transplant (float64, outputs and gradients).

Its global heads == our efficient attention (Shen et al., arXiv 1812.01243), plain and bucketed causal;
its whole LinearAttentionTransformer stack == minilin.model.Block stacks; its Linformer mode == our Linformer.
Also pins the library departures the notebook shows (D^-1/2 output factor, clamped causal denominator,
input_mask ignored in Linformer mode, ff_glu ignored), so that a new release that changes them fails here.
"""
import pytest
import torch

pytest.importorskip("linear_attention_transformer")
from linear_attention_transformer import LinearAttentionTransformer, LinformerSettings  # noqa: E402
from linear_attention_transformer.linear_attention_transformer import (  # noqa: E402
    SelfAttention,
    causal_linear_attn,
    linear_attn,
)

from minilin.efficient import EfficientSelfAttention, efficient_attention  # noqa: E402
from minilin.peers import (  # noqa: E402
    blocks_from_lat_transformer,
    compare_with_peer,
    lat_param_pairs,
    lat_self_attention_from_ours,
    ours_from_lat_self_attention,
)
from helpers import TOL, rand

pytestmark = [pytest.mark.peers, pytest.mark.usefixtures("one_thread")]


def padding_mask():
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[1, 11:] = False  # right padding in batch 1
    return mask


def grads(out, inputs, seed):
    w = rand(*out.shape, seed=seed)  # a random cotangent: no dependence can cancel by symmetry
    return torch.autograd.grad((out * w).sum(), inputs)


@pytest.mark.parametrize("causal, bucket", [(False, None), (True, None), (True, 4)])
@pytest.mark.parametrize("use_mask", [False, True])
def test_self_attention_transplant_outputs_and_gradients(causal, bucket, use_mask):
    torch.manual_seed(0)
    ours = EfficientSelfAttention(24, heads=3, bucket_size=bucket, chunk_size=5).double()
    lat = lat_self_attention_from_ours(ours, causal=causal)
    assert lat.global_attn_heads == 3 and lat.local_attn_heads == 0
    x = rand(2, 16, 24, seed=1).requires_grad_(True)
    mask = padding_mask() if use_mask else None
    y_ours, y_lat = ours(x, mask=mask, causal=causal), lat(x, input_mask=mask)
    torch.testing.assert_close(y_ours, y_lat, rtol=0, atol=TOL)
    names = ("to_q.weight", "to_k.weight", "to_v.weight", "to_out.weight", "to_out.bias")
    p_ours = [dict(ours.named_parameters())[n] for n in names]
    p_lat = [dict(lat.named_parameters())[n] for n in names]
    g_ours = grads(y_ours, [x, *p_ours], seed=2)
    g_lat = grads(y_lat, [x, *p_lat], seed=2)
    factor = 1.0 if causal else 24 // 3  # their to_out.weight is ours × √D, so its gradient is ours / √D
    for name, a, b in zip(("x", *names), g_ours, g_lat):
        scale = factor ** 0.5 if name == "to_out.weight" else 1.0
        torch.testing.assert_close(a, b * scale, rtol=0, atol=TOL, msg=name)


@pytest.mark.parametrize("causal, blindspot", [(False, 1), (True, 1), (True, 4)])
def test_ours_from_lat_round_trip(causal, blindspot):
    torch.manual_seed(1)
    lat = SelfAttention(24, 3, causal=causal, blindspot_size=blindspot).double()
    ours, got_causal = ours_from_lat_self_attention(lat)
    assert got_causal == causal and ours.bucket_size == (None if blindspot == 1 else blindspot)
    x = rand(2, 16, 24, seed=3)
    mask = padding_mask()
    torch.testing.assert_close(ours(x, mask=mask, causal=causal), lat(x, input_mask=mask), rtol=0, atol=TOL)
    back = lat_self_attention_from_ours(ours, causal=causal)
    for (n, a), (_, b) in zip(lat.state_dict().items(), back.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=0, atol=TOL, msg=n)


def test_adapters_refuse_what_they_cannot_map():
    with pytest.raises(ValueError, match="local"):
        ours_from_lat_self_attention(SelfAttention(24, 3, n_local_attn_heads=1))
    with pytest.raises(ValueError, match="bias=False"):
        lat_self_attention_from_ours(EfficientSelfAttention(24, heads=3, bias=True))
    with pytest.raises(ValueError, match="reversible=True"):
        blocks_from_lat_transformer(LinearAttentionTransformer(dim=16, depth=1, max_seq_len=16, heads=2,
                                                               reversible=True))


def test_their_kernels_are_our_efficient_attention():
    # The D^-1/2 departure: their non-causal output is ours scaled by D^-1/2; causally the factor cancels.
    q, k, v = rand(2, 3, 12, 5, seed=4), rand(2, 3, 12, 5, seed=5), rand(2, 3, 12, 5, seed=6)
    mask = torch.rand(2, 12, generator=torch.Generator().manual_seed(7)) > 0.3
    for m in (None, mask):
        theirs = linear_attn(q.clone(), k.clone(), v.clone(), kv_mask=m)  # clones: it masks k, v in place
        torch.testing.assert_close(theirs, efficient_attention(q, k, v, mask=m) * 5 ** -0.5, rtol=0, atol=TOL)
        for bucket in (1, 3, 4):
            theirs = causal_linear_attn(q.clone(), k.clone(), v.clone(), kv_mask=m, bucket_size=bucket)
            ours = efficient_attention(q, k, v, mask=m, causal=True, bucket_size=bucket)
            torch.testing.assert_close(theirs, ours, rtol=0, atol=TOL)


def test_their_causal_kernel_is_not_shift_invariant():
    # Mathematically the causal output ignores a constant added to every key (exp(k + c) cancels in the
    # ratio). Theirs clamps the denominator at 1e-3 (shrinks outputs when keys are very negative) and forms
    # exp(k) unguarded (inf/inf = NaN in float32 past k ≈ 88). Ours is invariant in both directions.
    q, k, v = rand(1, 2, 8, 4, seed=8), rand(1, 2, 8, 4, seed=9), rand(1, 2, 8, 4, seed=10)
    reference = efficient_attention(q, k, v, causal=True)
    low = causal_linear_attn(q.clone(), k.clone() - 12.0, v.clone(), bucket_size=1)
    assert (low - reference).abs().max() > 1e-2
    high = causal_linear_attn(q.float(), k.float() + 100.0, v.float(), bucket_size=1)
    assert torch.isnan(high).any()
    for shift in (-12.0, 100.0):
        ours = efficient_attention(q.float(), k.float() + shift, v.float(), causal=True)
        torch.testing.assert_close(ours.double(), reference, rtol=0, atol=1e-5)  # float32 round-off


def run_blocks(blocks, x, causal):
    for block in blocks:
        x = block(x, causal=causal)
    return x


def assert_pairs_cover_every_parameter(pairs, ours, theirs):
    assert {id(p[0]) for p in pairs} == {id(p) for p in ours.parameters()}
    assert {id(p[1]) for p in pairs} == {id(p) for p in theirs.parameters()}
    for mine, their, value_map, _ in pairs:  # the transplant put their values, mapped, into ours
        torch.testing.assert_close(mine, value_map(their), rtol=0, atol=TOL)


@pytest.mark.parametrize("kind", ["global", "causal", "linformer"])
def test_whole_stack_transplant(kind):
    torch.manual_seed(2)
    kwargs = {"global": {}, "causal": {"causal": True}, "linformer": {"linformer_settings": LinformerSettings(k=8)}}
    lat = LinearAttentionTransformer(dim=32, depth=2, max_seq_len=24, heads=4, **kwargs[kind]).double()
    blocks, causal = blocks_from_lat_transformer(lat)
    assert causal == (kind == "causal") and len(blocks) == 2
    pairs = lat_param_pairs(blocks, lat, causal=causal)
    assert_pairs_cover_every_parameter(pairs, blocks, lat)
    for n in (24, 17):  # 17 < max_seq_len: Linformer slices E/F on both sides
        gaps = compare_with_peer(lambda t: run_blocks(blocks, t, causal), lat, [rand(2, n, 32, seed=11 + n)],
                                 param_pairs=pairs, seed=12)
        assert max(gaps.values()) <= TOL, gaps


def test_compare_with_peer_sees_small_differences():
    torch.manual_seed(5)
    ours = EfficientSelfAttention(24, heads=3).double()
    lat = lat_self_attention_from_ours(ours, causal=False)
    pairs = lat_param_pairs(ours, lat, causal=False)
    assert_pairs_cover_every_parameter(pairs, ours, lat)
    x = rand(2, 8, 24, seed=16)
    gaps = compare_with_peer(ours, lat, [x], param_pairs=pairs)
    assert max(gaps.values()) <= TOL, gaps
    with torch.no_grad():
        lat.to_k.weight[0, 0] += 1e-6  # one weight nudged: every gap must notice
    gaps = compare_with_peer(ours, lat, [x], param_pairs=pairs)
    assert all(1e-12 < g < 1e-3 for g in gaps.values()), gaps
    with pytest.raises(ValueError, match="differ in shape"):
        compare_with_peer(ours, lambda t: lat(t)[:, 1:], [x])


def test_feed_forward_options_are_ignored_in_the_main_layers():
    # 0.19.1 builds the main stack's FeedForward(dim) without ff_glu / ff_dropout (only axial/context
    # layers get them): ask for a GLU and you get the plain 4·dim GELU MLP.
    lat = LinearAttentionTransformer(dim=16, depth=1, max_seq_len=16, heads=2, ff_glu=True, ff_dropout=0.5)
    ff = lat.layers.layers[0][1].fn.fn
    assert ff.glu is False and ff.w1.out_features == 4 * 16 and ff.dropout.p == 0.0


def test_linformer_mode_ignores_input_mask_and_refuses_causal():
    torch.manual_seed(4)
    lat = LinearAttentionTransformer(dim=16, depth=1, max_seq_len=16, heads=2,
                                     linformer_settings=LinformerSettings(k=4)).double()
    x = rand(2, 16, 16, seed=15)
    # input_mask is routed to the attention layer, whose forward(x, context=None, **kwargs) drops it:
    torch.testing.assert_close(lat(x, input_mask=padding_mask()), lat(x), rtol=0, atol=0)
    with pytest.raises(AssertionError, match="only be used for non-causal"):
        LinearAttentionTransformer(dim=16, depth=1, max_seq_len=16, causal=True,
                                   linformer_settings=LinformerSettings(k=4))


def test_adapters_leave_the_global_rng_alone():
    ours = EfficientSelfAttention(16, heads=2)
    lat_stack = LinearAttentionTransformer(dim=16, depth=1, max_seq_len=8, heads=2)
    torch.manual_seed(9)
    expected = torch.rand(3)
    torch.manual_seed(9)
    lat = lat_self_attention_from_ours(ours)  # each builds a module, whose init would draw from the global RNG
    ours_from_lat_self_attention(lat)
    blocks_from_lat_transformer(lat_stack)
    assert torch.equal(torch.rand(3), expected)
