"""Notebook 05's claims, re-checked on inputs and weights the notebook does not use (its former Check-yourself cell).

1. a padding mask passes two tests: (a) the real outputs do not move when only the padding changes; (b) they equal
   a run on the real tokens alone. performer-pytorch's mask= (values only) fails; minilin's layers pass.
2. LAT's global heads are efficient attention times D^-1/2; the package against the loops.
3. causality by changing the future: minilin leaves the past alone, performer-pytorch's detached max does not.
   Each of its two constants alone is enough.
   With both of its constants at 0 it cancels in float64, yet in float32 a large future makes the past NaN.
"""
import contextlib
import io
import warnings

import pytest
import torch

pytest.importorskip("linformer")
pytest.importorskip("linear_attention_transformer")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # performer_pytorch imports distutils' LooseVersion
    pp_mod = pytest.importorskip("performer_pytorch.performer_pytorch")
import linear_attention_transformer.linear_attention_transformer as lat_mod  # noqa: E402

from minilin import peers  # noqa: E402
from minilin.efficient import EfficientSelfAttention, efficient_attention, efficient_attention_loops  # noqa: E402
from minilin.linear import elu_plus_one, linear_attention  # noqa: E402
from minilin.linformer import LinformerSelfAttention  # noqa: E402
from minilin.performer import PerformerSelfAttention, favor_attention, orthogonal_gaussian  # noqa: E402
from minilin.probes import future_leakage  # noqa: E402

pytestmark = [pytest.mark.peers, pytest.mark.usefixtures("one_thread")]
f64 = torch.float64


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64)


def past_change(fn, x, t0=6):  # how far the outputs before t0 move when every position from t0 on is redrawn
    x2 = x.clone()
    x2[:, :, t0:] = randn(*x[:, :, t0:].shape, seed=96) * 2
    with torch.no_grad():
        return (fn(x2)[:, :, :t0] - fn(x)[:, :, :t0]).abs().max().item()


def test_padding_masks_pass_both_tests_and_performer_pytorchs_does_not():
    x = randn(2, 48, 32, seed=300)
    pad = torch.ones(2, 48, dtype=torch.bool)
    pad[0, 30:] = False
    x_other = x.clone()
    x_other[0, 30:] = randn(18, 32, seed=301) * 3

    def drift(layer):
        with torch.no_grad():
            real = layer(x, mask=pad)[0, :30]
            return max((layer(x_other, mask=pad)[0, :30] - real).abs().max().item(),  # (a)
                       (layer(x[:1, :30])[0] - real).abs().max().item())            # (b)

    torch.manual_seed(11)
    with contextlib.redirect_stdout(io.StringIO()):
        theirs = pp_mod.SelfAttention(dim=32, heads=4).double().eval()
    assert drift(theirs) > 1e-3  # values only
    for layer in (PerformerSelfAttention(32, heads=4, seed=12), EfficientSelfAttention(32, heads=4),
                  LinformerSelfAttention(32, heads=4, seq_len=48, proj_len=8)):
        assert drift(layer.double().eval()) < 1e-12, type(layer).__name__


def test_lat_global_heads_and_the_package_against_the_loops():
    q3, k3, v3 = randn(2, 3, 9, 5, seed=314), randn(2, 3, 11, 5, seed=315), randn(2, 3, 11, 5, seed=316)
    assert (lat_mod.linear_attn(q3, k3, v3) - efficient_attention(q3, k3, v3) * 5 ** -0.5).abs().max() < 1e-12
    q5, k5, v5 = randn(1, 2, 5, 3, seed=307), randn(1, 2, 7, 3, seed=308), randn(1, 2, 7, 2, seed=309)
    m5 = torch.tensor([[True, True, False, True, True, True, True]])
    for causal, b in ((False, None), (True, None), (True, 2)):
        assert torch.allclose(efficient_attention(q5, k5, v5, mask=m5, causal=causal, bucket_size=b),
                              efficient_attention_loops(q5, k5, v5, mask=m5, causal=causal, bucket_size=b), atol=1e-12)
    q6, k6, v6 = (randn(1, 2, 7, 3, seed=310 + i) for i in range(3))
    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    A = torch.einsum("bhnf,bhmf->bhnm", phi(q6), phi(k6)).tril()
    assert (linear_attention(q6, k6, v6, feature_map=elu_plus_one, causal=True, chunk_size=3)
            - A @ v6 / A.sum(-1, keepdim=True)).abs().max() < 1e-12


def test_changing_the_future_moves_performer_pytorchs_past_and_not_minilins():
    Wf = orthogonal_gaussian(32, 8, generator=torch.Generator().manual_seed(90), dtype=f64)
    with contextlib.redirect_stdout(io.StringIO()):
        their_causal = peers.PerformerPytorchFAVOR(Wf, causal=True)
    x = randn(1, 2, 12, 8, seed=306)
    assert past_change(lambda t: efficient_attention(t, t, t, causal=True, bucket_size=3), x) == 0.0
    assert past_change(lambda t: favor_attention(t, t, t, Wf, causal=True), x) == 0.0
    assert future_leakage(lambda t: their_causal(t, t, t), x, seq_dim=2,
                          generator=torch.Generator().manual_seed(2)) == 0.0
    assert past_change(lambda t: their_causal(t, t, t), x) > 1e-3



def test_each_of_performer_pytorchs_constants_alone_lets_the_future_move_the_past():
    # notebook 05, pitfall 3 sets both to 0; either one alone keeps e^c from cancelling (its former Appendix A cell)
    Wf = orthogonal_gaussian(32, 8, generator=torch.Generator().manual_seed(90), dtype=f64)
    x = randn(1, 2, 12, 8, seed=306)
    for feature_eps, denominator_eps in ((1e-4, 0.0), (0.0, 1e-6)):
        with contextlib.redirect_stdout(io.StringIO()):
            theirs = peers.PerformerPytorchFAVOR(Wf, causal=True, feature_eps=feature_eps, denominator_eps=denominator_eps)
        assert past_change(lambda t: theirs(t, t, t), x) > 1e-3, (feature_eps, denominator_eps)

def test_with_both_constants_at_0_a_large_future_still_makes_performer_pytorchs_past_nan_in_float32():
    # the stabiliser c is a max over all positions: a future 30x larger rounds every past e^(a - c) to 0 (0/0)
    Wf = orthogonal_gaussian(32, 8, generator=torch.Generator().manual_seed(90), dtype=f64).float()
    with contextlib.redirect_stdout(io.StringIO()):
        theirs = peers.PerformerPytorchFAVOR(Wf, causal=True, feature_eps=0.0, denominator_eps=0.0)
    x = randn(1, 2, 12, 8, seed=306).float()
    x_big = x.clone()
    x_big[:, :, 6:] = randn(1, 2, 6, 8, seed=97).float() * 30
    with torch.no_grad():
        assert not theirs(x, x, x).isnan().any()
        assert theirs(x_big, x_big, x_big)[:, :, :6].isnan().all()
        ours = [favor_attention(t, t, t, Wf, causal=True)[:, :, :6] for t in (x, x_big)]
    assert torch.equal(ours[0], ours[1])
