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
                                     RetentionSelfAttention)
from minilin.model import LMConfig, Rotary, TinyLM
from minilin.probes import future_leakage
from helpers import TOL, rand

pytestmark = pytest.mark.usefixtures("one_thread")

CLASSES = {"retention": RetentionSelfAttention, "gla": GLASelfAttention, "deltanet": DeltaNetSelfAttention,
           "gated-deltanet": GatedDeltaNetSelfAttention}
NAMES = list(CLASSES)


def build(name, dim=16, heads=2, chunk_size=4, seed=0, rotary=False):
    """A float64 module with chunks of 4 (so a dozen tokens cross chunk boundaries), torch's default init."""
    torch.manual_seed(seed)
    module = CLASSES[name](dim, heads, chunk_size=chunk_size).double().eval()
    module.rotary = Rotary(dim // heads) if rotary else None
    return module


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
def test_never_sees_the_future(name):
    module = build(name)
    x = rand(1, 13, 16, seed=2)
    assert future_leakage(lambda t: module(t, causal=True), x, generator=torch.Generator().manual_seed(0)) == 0.0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("rotary", [False, True])
def test_step_equals_forward(name, tokens, rotary):
    # T tokens per call (11 = 3 + 3 + 3 + 2): the state carries the matrix and the position (rotary's offset)
    module = build(name, rotary=rotary)
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
def test_module_is_the_pure_function_on_its_projections(name):
    # weight transplant: the projections and gates written out from the module's weights, then minilin.gated
    module = build(name)
    x = rand(2, 9, 16, seed=7)
    heads = lambda t: t.view(2, 9, 2, 8).transpose(1, 2)  # (B, N, H·D) -> (B, H, N, D)
    q, k, v = (heads(F.linear(x, lin.weight)) for lin in (module.to_q, module.to_k, module.to_v))
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
    want = F.linear(out.transpose(1, 2).reshape(2, 9, 16), module.to_out.weight, module.to_out.bias)
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
