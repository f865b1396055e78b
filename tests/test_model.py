"""TinyLM: loss and shift, causality of every attention, recurrent generation == full re-run, RoPE, SDPA,
per-layer (hybrid) attention, the causal-Linformer error, and the reference models."""
import math
from dataclasses import replace

import pytest
import torch

from minilin.efficient import EfficientSelfAttention
import torch.nn.functional as F

from minilin.attention import softmax_attention
from minilin.data import IGNORE, MASK_ID, ByteCorpus
from minilin.linformer import LinformerSelfAttention
from minilin.model import (
    ExactSelfAttention,
    LMConfig,
    Rotary,
    TinyLM,
    TransformerEncoderLM,
    build_model,
    count_parameters,
    lm_loss,
    sdpa_attention,
)
from minilin.performer import PerformerSelfAttention
from minilin.probes import future_leakage
from minilin.variants import ATTENTIONS, VARIANTS

TOL = 1e-10  # float64: step-by-step and full-sequence paths differ only by summation order (~1e-15)


# Models this small gain nothing from intra-op threads, and on a busy runner spinning OpenMP threads made
# these tests 10-40x slower (measured): one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(attention="exact", positions="learned", seed=0, scale=0.3, **kw):
    """A float64 TinyLM with weights scaled up from the GPT-2 init, so that attention is far from uniform and
    an error in a position, a cache or a state shows in the logits (at std 0.02 everything looks alike)."""
    torch.manual_seed(seed)
    config = LMConfig(**{**dict(vocab_size=256, block_size=24, dim=32, depth=2, heads=4, attention=attention,
                                positions=positions, nb_features=64), **kw})
    model = TinyLM(config).double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 and not name.endswith(("E", "F")):
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return model.eval()


def ids(B=2, N=20, seed=0):
    return torch.randint(256, (B, N), generator=torch.Generator().manual_seed(seed))


def test_forward_shapes_and_loss_is_the_shifted_cross_entropy():
    model = tiny()
    corpus = ByteCorpus(block_size=24)
    x, y = corpus.batch("train", 3, generator=torch.Generator().manual_seed(0))
    logits, loss = model(x, y)
    assert logits.shape == (3, 24, 256) and model(x)[1] is None
    # position t predicts byte t + 1 of the stream: y is x shifted left by one
    assert torch.equal(x[:, 1:], y[:, :-1])
    manual = -torch.log_softmax(logits, -1).gather(-1, y[..., None]).mean()
    torch.testing.assert_close(loss, manual.float(), rtol=0, atol=1e-6)
    # IGNORE positions carry no loss
    y2 = y.clone()
    y2[:, :12] = IGNORE
    torch.testing.assert_close(lm_loss(logits, y2), F.cross_entropy(logits[:, 12:].reshape(-1, 256).float(),
                                                                    y[:, 12:].reshape(-1)))


def test_init_scales_and_the_untrained_loss():
    torch.manual_seed(0)
    model = TinyLM(LMConfig(block_size=32, dim=64, depth=2))
    assert abs(model.tok_emb.weight.std().item() - 1) < 0.05 and abs(model.pos_emb.weight.std().item() - 1) < 0.1
    fc = model.blocks[0].mlp.fc.weight                        # (256, 64): N(0, 1/64)
    assert abs(fc.std().item() * 64 ** 0.5 - 1) < 0.05
    for block in model.blocks:                                # residual projections: 1/sqrt(fan_in) / sqrt(2 depth)
        for proj in (block.attn.to_out, block.mlp.proj):
            assert abs(proj.weight.std().item() * (proj.in_features * 4) ** 0.5 - 1) < 0.1
    # logits = head(LN(x)) with unit-variance features and N(0, 1/d) weights: std about 1, so the untrained loss
    # is about ln 256 + 1/2 (E log-sum-exp of 256 standard normals)
    logits, loss = model(ids(8, 32), ids(8, 32, seed=1))
    assert abs(logits.std().item() - 1) < 0.15
    assert abs(loss.item() - (math.log(256) + 0.5)) < 0.2


# every registry variant that can be causal, then hybrids (one name per layer)
CAUSAL_KINDS = [n for n in ATTENTIONS if VARIANTS[n].causal] + [["performer", "exact"], ["exact", "gated-deltanet"]]
RECURRENT_KINDS = [a for a in CAUSAL_KINDS if all(VARIANTS[n].recurrent for n in ([a] if isinstance(a, str) else a))]


@pytest.mark.parametrize("attention", CAUSAL_KINDS)
@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_causal_models_do_not_see_the_future(attention, positions):
    model = tiny(attention, positions)
    x = ids(2, 16)
    logits = model(x)[0]
    x2 = x.clone()
    x2[:, 9:] = (x2[:, 9:] + 1) % 256
    assert torch.equal(model(x2)[0][:, :9], logits[:, :9])  # bitwise: not a single future dependence
    assert not torch.allclose(model(x2)[0][:, 9:], logits[:, 9:])

    def trunk(h):  # embeddings -> final hidden states: the autograd probe checks every (t, s) pair
        for block in model.blocks:
            h = block(h, causal=True)
        return h
    assert future_leakage(trunk, model.embed(x).detach()) == 0.0


def test_bidirectional_linformer_model_sees_everything():
    model = tiny("linformer", causal=False, proj_len=8)
    h = model.embed(ids(1, 24)).detach()
    assert future_leakage(lambda t: model.blocks[0](t, causal=False), h) > 1e-3


def test_causal_linformer_is_a_clear_error():
    for attention in ("linformer", ["performer", "linformer"]):
        with pytest.raises(ValueError, match="Linformer cannot be causal") as err:
            TinyLM(LMConfig(attention=attention))
        assert "mlm" in str(err.value)  # ... and it says what to do instead
    model = TinyLM(LMConfig(attention="linformer", causal=False, block_size=32, dim=32))
    assert model(ids(2, 32))[0].shape == (2, 32, 256)
    with pytest.raises(ValueError, match="causal"):
        model.generate(ids(1, 4), 3)


@pytest.mark.parametrize("attention", RECURRENT_KINDS)
@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_step_by_step_equals_full_forward(attention, positions):
    model = tiny(attention, positions)
    x = ids(2, 20)
    full = model(x)[0]
    state, steps = None, []
    for t in range(x.shape[1]):
        logits, state = model.step(x[:, t], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=0, atol=TOL)
    assert state["position"] == 20


def test_performer_state_is_constant_size_exact_cache_grows():
    def state_numel(model, n):
        state = None
        for t in range(n):
            _, state = model.step(torch.tensor([t % 256]), state)
        tensors = [s.kv for s in state["layers"]] + [s.z for s in state["layers"]] if attention == "performer" \
            else [s["k"] for s in state["layers"]] + [s["v"] for s in state["layers"]]
        return sum(t.numel() for t in tensors)
    for attention in ("performer", "exact"):
        model = tiny(attention, "rope", block_size=8)
        short, long = state_numel(model, 4), state_numel(model, 40)  # rope: no table, runs past block_size
        assert (short == long) == (attention == "performer")


@pytest.mark.parametrize("attention", RECURRENT_KINDS)
def test_generate_recurrent_equals_rerunning_the_prefix(attention):
    model = tiny(attention, "rope")
    prompt = ids(2, 5)
    kw = dict(temperature=1.0, top_k=40)
    fast = model.generate(prompt, 15, generator=torch.Generator().manual_seed(7), recurrent=True, **kw)
    slow = model.generate(prompt, 15, generator=torch.Generator().manual_seed(7), recurrent=False, **kw)
    assert fast.shape == (2, 20) and torch.equal(fast[:, :5], prompt)
    assert torch.equal(fast, slow)
    greedy = model.generate(prompt, 15, temperature=0, recurrent=True)
    assert torch.equal(greedy, model.generate(prompt, 15, temperature=0, recurrent=False))
    assert not torch.equal(greedy, fast)  # sampling is not greedy decoding


def test_generate_falls_back_to_rerun_without_a_recurrent_form():
    model = tiny("linformer", causal=False)
    assert not model.can_step()
    with pytest.raises(ValueError, match="step needs"):
        model.step(ids(1, 1)[:, 0])
    bucketed = EfficientSelfAttention(16, 2, bucket_size=4)
    assert not bucketed.recurrent
    with pytest.raises(NotImplementedError, match="bucket_size=4"):
        bucketed.step(torch.randn(1, 1, 16))


def test_learned_positions_stop_at_block_size():
    model = tiny("performer", "learned", block_size=8)
    with pytest.raises(ValueError, match="block_size"):
        model(ids(1, 9))
    out = model.generate(ids(1, 6), 6, recurrent=False, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 12)  # re-running crops the prefix to block_size
    with pytest.raises(ValueError, match="past block_size"):
        model.generate(ids(1, 6), 6, recurrent=True)


def test_rotary_scores_depend_on_relative_position_only():
    rot = Rotary(8)
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 6, 8, generator=g, dtype=torch.float64) for _ in range(2))
    # the same q/k vectors at every position: scores then depend on (m - n) alone
    q, k = q[:, :, :1].expand(1, 2, 6, 8), k[:, :, :1].expand(1, 2, 6, 8)
    for offset in (0, 5, 100):
        rq, rk = rot(q, k, offset)
        s = rq @ rk.transpose(-2, -1)  # (1, 2, 6, 6)
        for d in range(-5, 6):
            diag = torch.diagonal(s, offset=d, dim1=-2, dim2=-1)
            torch.testing.assert_close(diag, diag[..., :1].expand_as(diag), rtol=0, atol=TOL)
        # ... and do depend on it: a rotary that rotates nothing (or by angle 0) gives q·k everywhere
        assert (s[..., 1, 0] - s[..., 5, 0]).abs().min() > 1e-3 and (s[..., 0, 1] - s[..., 0, 5]).abs().min() > 1e-3
        if offset == 0:
            base = s
        torch.testing.assert_close(s, base, rtol=0, atol=TOL)
    rq, _ = rot(q, k, 0)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), rtol=0, atol=TOL)  # a rotation
    torch.testing.assert_close(rq[:, :, 0], q[:, :, 0], rtol=0, atol=0)  # position 0: angle 0
    with pytest.raises(ValueError, match="even"):
        Rotary(7)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, m", [(6, 6), (3, 7)])
def test_sdpa_attention_matches_softmax_attention(causal, n, m):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, n, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 3, m, 4, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(2, m, dtype=torch.bool)
    mask[1] = False  # a batch row with no real key: zeros, not NaN
    mask[0, 1] = False
    for msk in (None, mask):
        out = sdpa_attention(q, k, v, mask=msk, causal=causal)
        torch.testing.assert_close(out, softmax_attention(q, k, v, mask=msk, causal=causal), rtol=0, atol=TOL)
    sdpa_attention(q, k, v, mask=mask, causal=causal).sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[1] == 0).all()


def test_exact_and_sdpa_models_are_the_same_function():
    a = tiny("exact")
    b = TinyLM(a.config.__class__(**{**a.config.__dict__, "attention": "sdpa"})).double().eval()
    b.load_state_dict(a.state_dict())
    x = ids(2, 24)
    torch.testing.assert_close(a(x)[0], b(x)[0], rtol=0, atol=TOL)


def test_hybrid_layers_and_per_layer_k():
    model = TinyLM(LMConfig(attention=["linformer", "linformer", "exact"], depth=3, causal=False,
                            proj_len=[8, 16, 4], block_size=32, dim=32))
    kinds = [type(b.attn) for b in model.blocks]
    assert kinds == [LinformerSelfAttention, LinformerSelfAttention, ExactSelfAttention]
    assert [b.attn.E.shape for b in model.blocks[:2]] == [(8, 32), (16, 32)]
    model = TinyLM(LMConfig(attention=["performer", "exact"], block_size=32, dim=32))
    assert isinstance(model.blocks[0].attn, PerformerSelfAttention)
    assert model.blocks[0].attn.seed != TinyLM(LMConfig(attention="performer")).blocks[1].attn.seed
    with pytest.raises(ValueError, match="one name per layer"):
        TinyLM(LMConfig(attention=["exact"], depth=2))
    with pytest.raises(ValueError, match="one length per layer"):
        TinyLM(LMConfig(attention="linformer", causal=False, proj_len=[8, 8, 8]))
    with pytest.raises(ValueError, match="unknown attention"):
        TinyLM(LMConfig(attention="flash"))


def test_layerwise_sharing_registers_one_E():
    model = TinyLM(LMConfig(attention="linformer", causal=False, linformer_sharing="layerwise", depth=3,
                            block_size=32, dim=32, proj_len=8))
    names = [n for n, _ in model.named_parameters() if n.endswith((".E", ".F"))]
    assert names == ["blocks.0.attn.E"]
    assert all(b.attn.E is model.blocks[0].attn.E for b in model.blocks)


def test_masked_lm_model_reads_the_mask_token():
    model = tiny("exact", causal=False)
    x = ids(2, 24)
    x[:, 3] = MASK_ID  # the embedding has a row for MASK_ID; the head predicts bytes only
    assert model(x)[0].shape == (2, 24, 256)
    assert model.tok_emb.num_embeddings == 257


@pytest.mark.parametrize("arch", ["torch-encoder", "torch-encoder-defaults"])
def test_transformer_encoder_baseline_is_causal(arch):
    torch.manual_seed(0)
    model = build_model(LMConfig(block_size=16, dim=32), arch).double().eval()
    x = ids(2, 16)
    x2 = x.clone()
    x2[:, 10:] = 0
    torch.testing.assert_close(model(x)[0][:, :10], model(x2)[0][:, :10], rtol=0, atol=TOL)
    assert not torch.allclose(model(x)[0][:, 10:], model(x2)[0][:, 10:])
    tiny_params = count_parameters(TinyLM(LMConfig(block_size=16, dim=32)))
    if arch == "torch-encoder":  # TinyLM's shape plus the biases of q, k, v
        assert count_parameters(model) == tiny_params + 2 * 3 * 32
    else:  # PyTorch's default feed-forward is 2048 wide
        assert model.encoder.layers[0].linear1.out_features == 2048


@pytest.mark.peers
def test_linear_attention_transformer_baseline_is_causal():
    torch.manual_seed(0)
    model = build_model(LMConfig(block_size=16, dim=32), "linear-attention-transformer").double().eval()
    x = ids(2, 16)
    x2 = x.clone()
    x2[:, 10:] = 0
    logits, loss = model(x, x)
    assert logits.shape == (2, 16, 256) and loss.ndim == 0
    torch.testing.assert_close(logits[:, :10], model(x2)[0][:, :10], rtol=0, atol=TOL)
    with pytest.raises(ValueError, match="unknown arch"):
        build_model(LMConfig(), "gpt")


@pytest.mark.parametrize("projection", ["linear", "mean", "conv"])
def test_layerwise_sharing_builds_for_every_projection_kind(projection):
    from minilin.model import LMConfig, TinyLM
    cfg = LMConfig(attention="linformer", causal=False, depth=2, block_size=32, proj_len=8,
                   linformer_sharing="layerwise", linformer_projection=projection)
    model = TinyLM(cfg)
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    logits, _ = model(idx)
    assert logits.shape == (2, 32, 256)
    if projection != "mean":  # one learned E for the whole model, the same object in every layer
        assert model.blocks[0].attn.E is model.blocks[1].attn.E


def test_gpt2_init_is_the_documented_alternative():
    torch.manual_seed(0)
    model = TinyLM(LMConfig(block_size=32, dim=64, depth=2, init="gpt2"))
    assert abs(model.tok_emb.weight.std().item() - 0.02) < 0.002
    assert abs(model.blocks[0].mlp.fc.weight.std().item() - 0.02) < 0.002
    assert abs(model.blocks[1].mlp.proj.weight.std().item() - 0.01) < 0.001      # 0.02 / sqrt(2 * depth)
    with pytest.raises(ValueError, match="init must be one of"):
        TinyLM(LMConfig(init="xavier"))


def test_attention_off_has_sdpa_weights_and_reads_no_other_position():
    """The attention-off baseline: TinyLM(sdpa)'s parameters for a seed, and each output depends on its own byte only."""
    config = LMConfig(block_size=24, dim=16, heads=2, depth=2)
    torch.manual_seed(3)
    off = build_model(config, "attention-off")
    torch.manual_seed(3)
    sdpa = build_model(replace(config, attention="sdpa"))
    assert off.state_dict().keys() == sdpa.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(off.state_dict().values(), sdpa.state_dict().values()))
    x = torch.randint(256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base = off(x)[0]
        assert not torch.allclose(base, sdpa(x)[0])               # the mixing step is what differs
        for t in (0, 11, 23):                                      # change every byte but t: output t is unchanged
            y = (x + 1) % 256
            y[:, t] = x[:, t]
            assert torch.equal(off(y)[0][:, t], base[:, t])
        y = x.clone(); y[:, 11] = (y[:, 11] + 1) % 256             # ... and changing byte t changes it
        assert not torch.allclose(off(y)[0][:, 11], base[:, 11])
    g = lambda: torch.Generator().manual_seed(0)
    assert torch.equal(off.generate(x[:, :3], 6, recurrent=True, generator=g()),
                       off.generate(x[:, :3], 6, recurrent=False, generator=g()))


def test_attention_off_trains_under_compare():
    from minilin.train import TrainConfig
    from minilin.train.compare import compare
    config = TrainConfig(model=LMConfig(block_size=16, dim=16, heads=2, depth=1), steps=2, batch_size=2,
                         eval_interval=2, eval_batches=1)
    rows = compare(["attention-off"], config, data=ByteCorpus(block_size=16))
    assert rows[0]["status"] == "ok" and rows[0]["arch"] == "attention-off" and math.isfinite(rows[0]["val_bits_per_byte"])


def test_sample_next_compares_devices_by_type_and_index(monkeypatch):
    """A generator made on torch.device("cuda") reports "cuda", the logits "cuda:0": the same device (issue 42's crash
    came from treating them as different and drawing on the CPU with a CUDA generator)."""
    from minilin.device import same_device
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert same_device("cuda", "cuda:0") and same_device(torch.device("cuda:0"), "cuda")
    assert not same_device("cuda", "cuda:1") and not same_device("cuda:0", "cpu")
    assert same_device("cpu", torch.device("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (checks a generator on another device)")
def test_sample_next_with_a_generator_on_another_device_than_the_logits():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    draws = {}
    for gen_dev, logit_dev in [("cuda", "cuda:0"), ("cuda:0", "cuda"), ("cuda", "cpu"), ("cpu", "cuda")]:
        out = sample_next(logits.to(logit_dev), generator=torch.Generator(device=gen_dev).manual_seed(3))
        assert out.device.type == torch.device(logit_dev).type and out.shape == (4,)
        draws[gen_dev, logit_dev] = out.cpu()
    assert torch.equal(draws["cuda", "cuda:0"], draws["cuda:0", "cuda"])  # same generator device, same draws
