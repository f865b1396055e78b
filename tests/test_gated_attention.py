"""The modules over minilin.gated (retention, GLA, DeltaNet, Gated DeltaNet): shapes, causality, decoding with
`step` (one token and three at a time, with rotary offsets), padding as no-op tokens, the causal-only refusal,
the gates' ranges, the module against the pure function on its own projections, and the benchmark builders.
(The registry-wide tests cover them too: tests/test_linear.py, tests/test_model.py, tests/test_train.py,
tests/test_bench.py.)"""
import math
import pytest
import torch
import torch.nn.functional as F

from minilin import bench, gated, variants
from minilin.gated_attention import (DeltaNetSelfAttention, GatedDeltaNetSelfAttention, GatedState, GLASelfAttention,
                                     RetentionSelfAttention, ShortConv)
from minilin.model import LMConfig, Rotary, TinyLM
from minilin.probes import future_leakage
from helpers import TOL, rand

pytestmark = pytest.mark.usefixtures("one_thread")

CLASSES = {"retention": RetentionSelfAttention, "gla": GLASelfAttention, "deltanet": DeltaNetSelfAttention,
           "gated-deltanet": GatedDeltaNetSelfAttention}
NAMES = list(CLASSES)


def build(name, dim=16, heads=2, chunk_size=4, seed=0, rotary=False, **options):
    """A float64 module with chunks of 4 (so a dozen tokens cross chunk boundaries), torch's default init.
    rotary=True: retention only (the other layers refuse a rotary embedding)."""
    torch.manual_seed(seed)
    module = CLASSES[name](dim, heads, chunk_size=chunk_size, **options).double().eval()
    module.rotary = Rotary(dim // heads) if rotary else None
    return module


# every combination of the options around the recurrence: short convolution on/off, output gate on/off
OPTIONS = [dict(conv_size=0, output_gate=False), dict(conv_size=4, output_gate=False),
           dict(conv_size=0, output_gate=True), dict(conv_size=3, output_gate=True)]


def test_the_registry_names_these_modules():
    for name, cls in CLASSES.items():
        v = variants.get(name)
        assert variants.resolve(v.module) is cls and v.causal and not v.bidirectional and v.recurrent and v.linear
        assert isinstance(variants.build_module(name, 8, 2), cls)


@pytest.mark.parametrize("name", NAMES)
def test_forward_shape(name):
    module = build(name)
    x = rand(2, 11, 16, seed=1)
    y = module(x)
    assert y.shape == (2, 11, 16) and y.dtype == torch.float64 and torch.isfinite(y).all()
    assert module(x[:, :0]).shape == (2, 0, 16)
    torch.testing.assert_close(module(x), module(x, causal=True), rtol=0, atol=0)  # causal is the default


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: f"conv{o['conv_size']}-gate{int(o['output_gate'])}")
def test_never_sees_the_future(name, options):
    module = build(name, **options)
    x = rand(1, 13, 16, seed=2)
    assert future_leakage(lambda t: module(t, causal=True), x, generator=torch.Generator().manual_seed(0)) == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_defaults_are_fla_layers(name):
    # flash-linear-attention's layer defaults: short convolutions in the delta layers only, an output gate except
    # in DeltaNet (use_gate=False), an RMSNorm on every output; a rotary embedding in retention only
    module = CLASSES[name](16, 2)
    assert (module.convs is not None) == (name in ("deltanet", "gated-deltanet"))
    assert (module.to_out_gate is not None) == (name != "deltanet")
    assert isinstance(module.out_norm, torch.nn.RMSNorm) and module.takes_rotary == (name == "retention")
    if name != "retention":
        with pytest.raises(ValueError, match="takes no rotary embedding.*positions come from the recurrence"):
            module.rotary = Rotary(8)


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_no_recurrent_layer_but_retention_rotates(monkeypatch, positions):
    # a model of every recurrent layer and an exact one: RoPE is called by the exact layer (and retention's) only,
    # once per forward; GLA, DeltaNet and Gated DeltaNet never see it
    calls = []
    original = Rotary.__call__
    monkeypatch.setattr(Rotary, "__call__", lambda self, q, k, offset=0: calls.append(q.shape) or
                        original(self, q, k, offset))
    kinds = ["gla", "deltanet", "gated-deltanet", "exact", "retention"]
    model = TinyLM(LMConfig(attention=kinds, depth=5, dim=16, heads=2, block_size=16, positions=positions))
    rotated = [type(b.attn).__name__ for b in model.blocks if b.attn.rotary is not None]
    model(torch.zeros(1, 6, dtype=torch.long))
    if positions == "learned":
        assert rotated == [] and calls == []
    else:
        assert rotated == ["ExactSelfAttention", "RetentionSelfAttention"] and len(calls) == 2
    # and the output of a rotation-free layer does not change when RoPE's base changes (it is not used)
    if positions == "rope":
        x = torch.randint(0, 256, (1, 9))
        before = model.blocks[1].attn(model.embed(x))
        model.rotary.base = 7.0
        torch.testing.assert_close(model.blocks[1].attn(model.embed(x)), before, rtol=0, atol=0)


def test_short_conv_is_the_token_loop():
    # y_t = SiLU(Σ_j w_{K−1−j} x_{t−j}), zeros before the start; in pieces with the cache; with pads removed
    torch.manual_seed(0)
    conv = ShortConv(5, 4).double()
    x = rand(2, 9, 5, seed=20)
    w = conv.weight[:, 0]  # (C, K)
    loop = torch.stack([F.silu(sum(w[:, 3 - j] * x[:, t - j] for j in range(4) if t - j >= 0)) for t in range(9)], 1)
    y, cache = conv(x)
    torch.testing.assert_close(y, loop, rtol=0, atol=1e-14)
    torch.testing.assert_close(cache, x[:, -3:], rtol=0, atol=0)
    parts, cache = [], None
    for t0, t1 in ((0, 1), (1, 5), (5, 9)):
        part, cache = conv(x[:, t0:t1], cache)
        parts.append(part)
    torch.testing.assert_close(torch.cat(parts, 1), loop, rtol=0, atol=1e-14)
    holes = torch.tensor([[True, False, False, True, True, True, False, True, True]] * 2)
    packed, _ = conv(x[:, holes[0]])  # the run without the pads
    garbage = x.masked_fill(~holes[..., None], float("nan"))
    torch.testing.assert_close(conv(garbage, mask=holes)[0][holes].view(2, -1, 5), packed, rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="conv_size must be an int >= 2"):
        ShortConv(5, 1)


@pytest.mark.parametrize("name", NAMES)
def test_output_norm_and_gate_are_fla_gated_rmsnorm(name):
    # finish(o, x) = to_out(RMSNorm(o) ⊙ SiLU(W_g x)) per head, with the RMSNorm weight shared by the heads
    module = build(name, output_gate=True)
    with torch.no_grad():
        module.out_norm.weight.copy_(torch.linspace(0.5, 1.5, 8, dtype=torch.float64))
    x, o = rand(2, 5, 16, seed=21), rand(2, 2, 5, 8, seed=22)
    rms = o / (o.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * module.out_norm.weight
    gate = F.silu(F.linear(x, module.to_out_gate.weight)).view(2, 5, 2, 8).transpose(1, 2)
    want = F.linear((rms * gate).transpose(1, 2).reshape(2, 5, 16), module.to_out.weight, module.to_out.bias)
    torch.testing.assert_close(module.finish(o, x), want, rtol=0, atol=1e-12)
    # the norm removes the scale of the recurrence's output: o and 1000·o give one result (up to eps = 1e-5 in
    # the mean square: a relative change of about eps / (2·mean(o²)))
    torch.testing.assert_close(module.finish(1000 * o, x), want, rtol=0, atol=2e-5)


@pytest.mark.parametrize("name", ["deltanet", "gated-deltanet"])
def test_allow_neg_eigval_doubles_beta(name):
    plain, neg = build(name), build(name, allow_neg_eigval=True)
    x = rand(2, 9, 16, seed=23)
    torch.testing.assert_close(neg.gates(x)["beta"], 2 * plain.gates(x)["beta"], rtol=0, atol=0)
    y = neg(x)  # β in (0, 2) with unit keys: within the rule, accepted, finite
    assert torch.isfinite(y).all()
    state, outs = None, []
    for t in range(9):
        out, state = neg.step(x[:, t:t + 1], state)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, 1), y, rtol=0, atol=TOL)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: f"conv{o['conv_size']}-gate{int(o['output_gate'])}")
def test_step_equals_forward(name, tokens, options):
    # T tokens per call (11 = 3 + 3 + 3 + 2): the state carries the matrix, the position (retention's rotary
    # offset) and the short convolutions' last inputs
    module = build(name, rotary=name == "retention", **options)
    x = rand(2, 11, 16, seed=3)
    state, outs = None, []
    for t in range(0, 11, tokens):
        y, state = module.step(x[:, t:t + tokens], state)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, dim=1), module(x, causal=True), rtol=0, atol=TOL)
    assert isinstance(state, GatedState) and state.position == 11 and state.S.shape == (2, 2, 8, 8)
    assert state.S.numel() * state.S.element_size() == gated.state_bytes(8, 8, 2, dtype=torch.float64) * 2  # B=2


@pytest.mark.parametrize("name", NAMES)
def test_chunk_size_changes_nothing(name):
    x = rand(2, 11, 16, seed=4)
    outs = [build(name, chunk_size=c)(x) for c in (1, 4, 64)]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=0, atol=TOL)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("garbage", [1e3, float("nan")])
def test_padding_is_a_no_op(name, garbage):
    module = build(name)
    real = rand(2, 7, 16, seed=5)
    pads = torch.full((2, 4, 16), garbage, dtype=torch.float64)
    alone = module(real)
    # right padding: the real positions come first, the outputs there are the unpadded run's
    mask = torch.cat([torch.ones(2, 7, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.bool)], dim=1)
    right = module(torch.cat([real, pads], dim=1), mask=mask)
    torch.testing.assert_close(right[:, :7], alone, rtol=0, atol=TOL)
    # left padding: pads leave the state as it was (zero), so the real tokens see what they see without them
    left = module(torch.cat([pads, real], dim=1), mask=mask.flip(1))
    torch.testing.assert_close(left[:, 4:], alone, rtol=0, atol=TOL)
    # padding in the middle of one sequence: the run without those tokens
    mid = torch.cat([real[:1, :3], pads[:1], real[:1, 3:]], dim=1)
    holes = torch.tensor([[True] * 3 + [False] * 4 + [True] * 4])
    torch.testing.assert_close(module(mid, mask=holes)[holes], alone[0], rtol=0, atol=TOL)


@pytest.mark.parametrize("name", NAMES)
def test_non_causal_is_refused(name):
    module = build(name)
    with pytest.raises(ValueError, match=r"causal by construction.*causal=True"):
        module(rand(1, 5, 16), causal=False)
    with pytest.raises(ValueError, match="causal by construction"):
        TinyLM(LMConfig(attention=name, causal=False, dim=16, heads=2, block_size=8))
    with pytest.raises(ValueError, match=f"add '-causal': {name}-causal"):
        bench.get_method(name)


@pytest.mark.parametrize("name", NAMES)
def test_gates_are_in_range(name):
    module = build(name)
    for scale in (1.0, 100.0):  # large inputs saturate the sigmoids: still in range
        gates = module.gates(rand(2, 9, 16, seed=6, scale=scale))
        for key, g in gates.items():
            assert g.shape[:3] == (2, 2, 9) and torch.isfinite(g).all()
            if key == "beta":
                assert ((0 <= g) & (g <= 1)).all()
            else:  # a log decay
                assert (g <= 0).all()
    if name == "gla":  # at most logsigmoid's range over the temperature 16
        assert gates["log_gate"].shape == (2, 2, 9, 8) and module.gate_logit_normalizer == 16.0
    if name == "retention":
        torch.testing.assert_close(module.gamma.double(), gated.retention_gammas(2), rtol=0, atol=0)
        assert "gamma" not in module.state_dict()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("conv", [False, True])
def test_module_is_the_pure_function_on_its_projections(name, conv):
    # weight transplant: the projections (short convolutions, SiLU), gates and output norm and gate written out
    # from the module's weights, then minilin.gated
    module = build(name, conv_size=4 if conv else 0, output_gate=True)
    x = rand(2, 9, 16, seed=7)
    heads = lambda t: t.view(2, 9, 2, 8).transpose(1, 2)  # (B, N, H·D) -> (B, H, N, D)
    qkv = [F.linear(x, lin.weight) for lin in (module.to_q, module.to_k, module.to_v)]
    if conv:  # causal depthwise, SiLU: left-pad K − 1 zeros
        qkv = [F.silu(F.conv1d(F.pad(t.transpose(1, 2), (3, 0)), c.weight, groups=16).transpose(1, 2))
               for t, c in zip(qkv, module.convs)]
    elif name in ("deltanet", "gated-deltanet"):
        qkv = [F.silu(t) for t in qkv]
    q, k, v = (heads(t) for t in qkv)
    if name == "retention":
        out = gated.retention(q, k, v, gated.retention_gammas(2))
    elif name == "gla":
        down, up = module.to_gate
        out = gated.gla(q, k, v, heads(F.logsigmoid(F.linear(F.linear(x, down.weight), up.weight, up.bias)) / 16))
    else:
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
        beta = torch.sigmoid(F.linear(x, module.to_beta.weight, module.to_beta.bias)).transpose(1, 2)
        if name == "deltanet":
            out = gated.delta_rule(q, k, v, beta)
        else:
            log_alpha = (-module.A_log.exp() * F.softplus(F.linear(x, module.to_alpha.weight) + module.dt_bias)).transpose(1, 2)
            out = gated.gated_delta_rule(q, k, v, beta, log_alpha)
    normed = out / (out.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * F.silu(heads(F.linear(x, module.to_out_gate.weight)))
    want = F.linear(normed.transpose(1, 2).reshape(2, 9, 16), module.to_out.weight, module.to_out.bias)
    torch.testing.assert_close(module(x), want, rtol=0, atol=TOL)
    # mix on the module's own projections and gates is that function too
    qm, km, vm = module.project(x)
    torch.testing.assert_close(module.mix(qm, km, vm, gates=module.gates(x)), out, rtol=0, atol=TOL)


def test_mix_needs_the_gates_that_come_from_x():
    q = k = v = rand(1, 2, 5, 8, seed=8)
    with pytest.raises(ValueError, match=r"needs its gates \['log_gate'\].*module.gates\(x\)"):
        build("gla").mix(q, k, v)
    retention = build("retention")  # γ is a buffer: nothing to pass
    torch.testing.assert_close(retention.mix(q, k, v), gated.retention(q, k, v, retention.gamma, chunk_size=4),
                               rtol=0, atol=0)


def test_bad_chunk_size_is_refused():
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        DeltaNetSelfAttention(16, 2, chunk_size=0)


def test_hybrid_model_keeps_a_fixed_state_for_its_gated_layer():
    # ["exact", "gated-deltanet"]: the exact layer's cache grows with the text, the gated layer's state does not
    torch.manual_seed(0)
    model = TinyLM(LMConfig(attention=["exact", "gated-deltanet"], dim=16, heads=2, block_size=64)).eval()
    sizes = []
    state = None
    for t in range(12):
        _, state = model.step(torch.tensor([t]), state)
        cache, recurrent = state["layers"]
        sizes.append((cache["k"].shape[2], tuple(recurrent.S.shape), recurrent.position))
    assert sizes[3] == (4, (1, 2, 8, 8), 4) and sizes[-1] == (12, (1, 2, 8, 8), 12)


@pytest.mark.parametrize("name", NAMES)
def test_bench_builder_is_the_function_with_fixed_gates(name):
    # the builder draws its gates once from the case's tensor factory: drawn again from the same seed, the pure
    # function on them gives the same output; on "meta" the model runs the same code
    cfg = bench.BenchConfig(batch=2, heads=2, dim_head=8, progress=False)
    fn = bench.attention_fn(f"{name}-causal", 70, cfg, bench.Tensors("cpu", torch.float64, 0))
    q, k, v = (rand(2, 2, 70, 8, seed=s) for s in (9, 10, 11))
    make = bench.Tensors("cpu", torch.float64, 0)
    unit = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    if name == "retention":
        want = gated.retention(q, k, v, gated.retention_gammas(2))
    elif name == "gla":
        want = gated.gla(q, k, v, (F.logsigmoid(make.randn(1, 2, 70, 8)) / 16).expand(2, 2, 70, 8))
    elif name == "deltanet":
        want = gated.delta_rule(*unit, v, torch.sigmoid(make.randn(1, 2, 70)).expand(2, 2, 70))
    else:
        beta, log_alpha = torch.sigmoid(make.randn(1, 2, 70)), F.logsigmoid(make.randn(1, 2, 70))
        want = gated.gated_delta_rule(*unit, v, beta.expand(2, 2, 70), log_alpha.expand(2, 2, 70))
    torch.testing.assert_close(fn(q, k, v), want, rtol=0, atol=0)
    assert all(value > 0 for value in bench.model_case(f"{name}-causal", 70, cfg).values())
    with pytest.raises(ValueError, match="causal by construction"):
        variants.resolve(variants.get(name).bench)(70, bench.Tensors("cpu", torch.float64, 0), causal=False,
                                                    heads=2, dim_head=8)


def test_gated_deltanet_starts_with_mamba2_decays():
    # A_h ~ U(0, 16), Δ_h log-uniform in [0.001, 0.1] (flash-linear-attention's GatedDeltaNet): with x = 0 the decay
    # is exp(−A_h Δ_h), between exp(−1.6) and 1; over many heads the steps spread over the whole range
    torch.manual_seed(0)
    module = GatedDeltaNetSelfAttention(16, heads=64, dim_head=2)
    dt, a = F.softplus(module.dt_bias.detach().double()), module.A_log.detach().double().exp()
    assert (dt >= 0.001 - 1e-12).all() and (dt <= 0.1 + 1e-12).all() and dt.min() < 0.003 and dt.max() > 0.05
    assert (a > 0).all() and (a <= 16).all() and a.max() > 12
    alpha = module.log_alpha(torch.zeros(1, 3, 16)).exp()                     # (1, H, 3)
    torch.testing.assert_close(alpha[0, :, 0].double(), torch.exp(-a * dt), rtol=1e-6, atol=0)
    assert alpha.min() >= math.exp(-1.6) - 1e-6 and alpha.median() > 0.9   # most heads keep most of their state
