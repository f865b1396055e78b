"""Grades exercises/ex05_peers.py (or solutions/ with --impl solutions) against minilin and the peers."""
import pytest
import torch

from minilin.bench import flop_counter
from minilin.efficient import EfficientSelfAttention
from minilin.efficient import efficient_attention as reference
from minilin.linformer import LinformerSelfAttention
from minilin.model import Block, LMConfig
from minilin.probes import future_leakage

TOL = 1e-10  # float64: only round-off separates a correct answer from the reference


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Every tensor here is tiny: handing work to threads costs more than it saves, and on a busy 2-core
    # runner each hand-off can wait ~20 ms. One thread keeps this file fast and its timing stable.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.task5_1
def test_efficient_attention(impl):
    q, k, v = rand(2, 3, 5, 4, seed=1), rand(2, 3, 7, 4, seed=2), rand(2, 3, 7, 3, seed=3)
    mask = torch.tensor([[True, False, True, True, True, False, True], [False] * 7])
    fn = impl("ex05_peers").efficient_attention
    got = fn(q, k, v, mask=mask)
    assert got.shape == (2, 3, 5, 3)
    assert torch.isfinite(got).all() and (got[1] == 0).all()  # no real key: zeros, not NaN
    torch.testing.assert_close(got, reference(q, k, v, mask=mask), rtol=0, atol=TOL)
    torch.testing.assert_close(fn(q, k * 50.0, v), reference(q, k * 50.0, v), rtol=0, atol=TOL)  # stable
    torch.testing.assert_close(fn(q, k, v), reference(q, k, v), rtol=0, atol=TOL)


@pytest.mark.task5_2
@pytest.mark.parametrize("bucket", [1, 2, 4])
def test_causal_efficient_attention(impl, bucket):
    q, k, v = rand(2, 2, 8, 4, seed=4), rand(2, 2, 8, 4, seed=5), rand(2, 2, 8, 3, seed=6)
    fn = impl("ex05_peers").causal_efficient_attention
    got = fn(q, k, v, bucket_size=bucket)
    expected = reference(q, k, v, causal=True, bucket_size=bucket)
    torch.testing.assert_close(got, expected, rtol=0, atol=TOL)
    x = rand(1, 2, 8, 4, seed=7)
    leak = future_leakage(lambda t: fn(t, t, t, bucket_size=bucket), x, seq_dim=2,
                          generator=torch.Generator().manual_seed(0))
    assert leak == 0.0


@pytest.mark.task5_3
@pytest.mark.peers
def test_transplant_into_lat(impl):
    lat_module = pytest.importorskip("linear_attention_transformer.linear_attention_transformer")
    torch.manual_seed(0)
    ours = EfficientSelfAttention(24, heads=3).double()
    lat = lat_module.SelfAttention(24, 3).double()
    out = impl("ex05_peers").transplant_into_lat(ours, lat)
    assert out is lat
    x = rand(2, 10, 24, seed=8)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[0, 7:] = False
    torch.testing.assert_close(lat(x), ours(x), rtol=0, atol=TOL)
    torch.testing.assert_close(lat(x, input_mask=mask), ours(x, mask=mask), rtol=0, atol=TOL)


@pytest.mark.task5_4
@pytest.mark.peers
def test_linformer_into_ours(impl):
    linformer = pytest.importorskip("linformer")
    torch.manual_seed(1)
    theirs = linformer.LinformerSelfAttention(dim=24, seq_len=16, k=4, heads=3).double()
    ours = LinformerSelfAttention(24, heads=3, seq_len=16, k=4, sharing="headwise").double()
    out = impl("ex05_peers").linformer_into_ours(theirs, ours)
    assert out is ours
    for n in (16, 11):  # shorter inputs use the first n columns of E, F on both sides
        x = rand(2, n, 24, seed=9 + n)
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=TOL)


@pytest.mark.task5_5
@pytest.mark.parametrize("k", [None, 8])
def test_block_flops(impl, k):
    fn = impl("ex05_peers").block_flops
    got = fn(2, 32, 48, k=k)
    config = LMConfig(dim=48, heads=4, depth=1, causal=False, block_size=32,
                      attention="exact" if k is None else "linformer", linformer_k=8 if k is None else k)
    with torch.device("meta"):  # shapes only: FlopCounterMode counts without computing
        block, x = Block(config, 0), torch.empty(2, 32, 48)
    with flop_counter() as counter:
        block(x, causal=False)
    assert isinstance(got, int) and got == counter.get_total_flops()
    assert fn(2, 32, 48, k=k, ff_mult=2) < got
    config.heads = 8  # the count does not depend on the number of heads
    with torch.device("meta"):
        block = Block(config, 0)
    with flop_counter() as counter:
        block(x, causal=False)
    assert fn(2, 32, 48, k=k) == counter.get_total_flops()
