"""Grades exercises/ex01_attention.py (or solutions/ with --impl solutions) against minilin.attention."""
import math

import pytest
import torch

from minilin.attention import allowed_keys, attention_matrix, softmax_attention

TOL = 1e-10  # float64: only round-off separates a correct answer from the reference


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.task1_1
def test_scaled_scores(impl):
    q, k = rand(2, 3, 5, 4, seed=1), rand(2, 3, 7, 4, seed=2)
    got = impl("ex01_attention").scaled_scores(q, k)
    assert got.shape == (2, 3, 5, 7)
    torch.testing.assert_close(got, q @ k.transpose(-2, -1) / 2.0, rtol=0, atol=TOL)


@pytest.mark.task1_2
def test_stable_softmax(impl):
    softmax = impl("ex01_attention").stable_softmax
    x = rand(3, 6, seed=3) * 1000.0                    # exp(1000) overflows: only a stable version survives
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1), rtol=0, atol=TOL)
    torch.testing.assert_close(softmax(x, dim=0), torch.softmax(x, dim=0), rtol=0, atol=TOL)
    x[1] = float("-inf")
    out = softmax(x)
    assert torch.isfinite(out).all() and (out[1] == 0).all()


@pytest.mark.task1_3
@pytest.mark.parametrize("n, m", [(4, 4), (3, 6), (1, 5)])
def test_causal_mask(impl, n, m):
    got = impl("ex01_attention").causal_mask(n, m)
    assert got.dtype == torch.bool and got.shape == (n, m)
    assert torch.equal(got, allowed_keys(n, m, causal=True)[0, 0])


@pytest.mark.task1_4
@pytest.mark.parametrize("causal", [False, True])
def test_attention(impl, causal):
    q, k, v = rand(2, 2, 5, 4, seed=4), rand(2, 2, 5, 4, seed=5), rand(2, 2, 5, 3, seed=6)
    mask = torch.tensor([[True, True, False, True, True], [False, False, True, True, True]])
    got = impl("ex01_attention").attention(q, k, v, mask=mask, causal=causal)
    torch.testing.assert_close(got, softmax_attention(q, k, v, mask=mask, causal=causal), rtol=0, atol=TOL)
    assert torch.isfinite(got).all()
    got = impl("ex01_attention").attention(q, k, v)
    torch.testing.assert_close(got, attention_matrix(q, k) @ v, rtol=0, atol=TOL)


@pytest.mark.task1_5
def test_score_matrix_bytes(impl):
    f = impl("ex01_attention").score_matrix_bytes
    assert f(1, 1, 512, torch.float32) == 512 * 512 * 4
    assert f(8, 8, 2048, torch.float16) == 8 * 8 * 2048**2 * 2
    assert f(2, 3, 10, torch.float64) == 2 * 3 * 100 * 8
    assert isinstance(f(1, 1, 4, torch.bfloat16), int)
    assert math.isclose(f(4, 16, 32768, torch.float16) / 2**30, 128.0)
