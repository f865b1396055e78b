"""Notebook 05's claims, re-checked on inputs and weights the notebook does not use (its former Check-yourself cell).

1. a padding mask passes two tests: (a) the real outputs do not move when only the padding changes; (b) they equal
   a run on the real tokens alone. performer-pytorch's mask= (values only) fails; minilin's layers pass.
2, 3. elu+1 on fresh isotropic inputs: about as far from softmax as uniform attention, rows that barely depend on
   the query (key-keyed stripes); on structured inputs it focuses, below softmax.
4. LAT's global heads are efficient attention times D^-1/2; the package against the loops.
5. causality by changing the future: minilin leaves the past alone, performer-pytorch's detached max does not.
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
from minilin.attention import attention_matrix, softmax_attention  # noqa: E402
from minilin.efficient import EfficientSelfAttention, efficient_attention, efficient_attention_loops  # noqa: E402
from minilin.linear import elu_plus_one, linear_attention  # noqa: E402
from minilin.linformer import LinformerSelfAttention  # noqa: E402
from minilin.performer import PerformerSelfAttention, favor_attention, orthogonal_gaussian  # noqa: E402
from minilin.probes import future_leakage  # noqa: E402

pytestmark = [pytest.mark.peers, pytest.mark.usefixtures("one_thread")]
f64 = torch.float64


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64)


def rel_error(out, ref):
    return ((out - ref).norm() / ref.norm()).item()


def row_spread(A):  # mean total-variation distance of each row to the average row
    return (0.5 * (A - A.mean(dim=0, keepdim=True)).abs().sum(-1)).mean().item()


def log_split(A):  # spread over a row's keys of its log-weights: (key-only part, query-dependent part)
    L = A.log()
    key_only = L.mean(dim=0)
    return key_only.std().item(), (L - key_only).std(dim=1).mean().item()


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


def test_elu_plus_one_on_fresh_isotropic_inputs_is_about_uniform_attention_with_striped_rows():
    q, k, v = (randn(1, 1, 32, 16, seed=302 + i) for i in range(3))
    ref = softmax_attention(q, k, v)
    uniform = rel_error(v.mean(dim=-2, keepdim=True).expand_as(v), ref)
    assert abs(rel_error(linear_attention(q, k, v, feature_map=elu_plus_one), ref) - uniform) < 0.2 * uniform
    eye = torch.eye(32, dtype=f64)[None, None]
    A, A_exact = linear_attention(q, k, eye, feature_map=elu_plus_one)[0, 0], attention_matrix(q, k)[0, 0]
    assert row_spread(A_exact) / 20 < row_spread(A) < row_spread(A_exact) / 3  # not uniform, far from softmax
    assert log_split(A)[0] > log_split(A)[1]  # stripes: the key-only part is the larger
    assert log_split(A_exact)[0] < log_split(A_exact)[1]


@pytest.mark.parametrize("n", [8, 24])
def test_elu_plus_one_focuses_on_structured_inputs_below_softmax(n):
    eye = torch.eye(n, dtype=f64)[None, None]
    own = {}
    for a in (1.0, 2.0, 4.0, 6.0):
        keys = a * (2 * torch.eye(n, dtype=f64) - 1)[None, None]  # key j: +a at entry j, -a elsewhere; query i = key i
        own[a] = (linear_attention(keys, keys, eye, feature_map=elu_plus_one)[0, 0].diagonal().mean().item(),
                  attention_matrix(keys, keys)[0, 0].diagonal().mean().item())
    assert all(elu < soft for elu, soft in own.values())
    assert own[6.0][0] > 0.9 and all(own[a][0] < own[b][0] for a, b in ((1.0, 2.0), (2.0, 4.0), (4.0, 6.0)))


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
