"""Grades exercises/ex03_linformer.py (or solutions/ with --impl solutions) against minilin.linformer."""
import math

import pytest
import torch

from minilin import linformer

TOL = 1e-10  # float64: only round-off separates a correct answer from the reference


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


MASK = torch.tensor([[True, True, True, True, False, False], [True, False, True, True, True, True]])


@pytest.mark.task3_1
@pytest.mark.parametrize("per_head", [False, True])
def test_project_sequence(impl, per_head):
    x = rand(2, 3, 6, 4, seed=1)
    E = rand(3, 5, 8, seed=2) if per_head else rand(5, 8, seed=2)  # seq_len 8 > M = 6: use the first 6 columns
    got = impl("ex03_linformer").project_sequence(x, E)
    assert got.shape == (2, 3, 5, 4)
    torch.testing.assert_close(got, E[..., :6] @ x, rtol=0, atol=TOL)
    x_nan = x.clone()
    x_nan[~MASK[:, None, :, None].expand_as(x)] = float("nan")  # padding may hold anything
    got = impl("ex03_linformer").project_sequence(x_nan, E, MASK)
    torch.testing.assert_close(got, E[..., :6] @ x.masked_fill(~MASK[:, None, :, None], 0.0), rtol=0, atol=TOL)


@pytest.mark.task3_2
@pytest.mark.parametrize("use_mask", [False, True])
def test_linformer_forward(impl, use_mask):
    q, k, v = rand(2, 3, 5, 4, seed=3), rand(2, 3, 6, 4, seed=4), rand(2, 3, 6, 2, seed=5)
    E, F = rand(3, 4, 8, seed=6), rand(4, 8, seed=7)
    mask = MASK if use_mask else None
    got = impl("ex03_linformer").linformer_forward(q, k, v, E, F, mask=mask)
    torch.testing.assert_close(got, linformer.linformer_attention(q, k, v, E, F, mask=mask), rtol=0, atol=TOL)
    I = torch.eye(6, dtype=torch.float64)  # k = n and E = F = I: exact attention
    from minilin.attention import softmax_attention
    torch.testing.assert_close(impl("ex03_linformer").linformer_forward(q, k, v, I, I),
                               softmax_attention(q, k, v), rtol=0, atol=TOL)


@pytest.mark.task3_2
def test_linformer_forward_refuses_long_sequences(impl):
    q = rand(1, 1, 6, 2, seed=8)
    with pytest.raises(ValueError):
        impl("ex03_linformer").linformer_forward(q, q, q, rand(2, 5, seed=9), rand(2, 5, seed=10))


@pytest.mark.task3_3
def test_projection_matrix_count(impl):
    count = impl("ex03_linformer").projection_matrix_count
    for sharing in linformer.SHARING:
        for layers, heads in ((12, 12), (3, 5), (1, 1)):
            assert count(sharing, layers, heads) == linformer.projection_matrix_count(sharing, layers=layers,
                                                                                      heads=heads)
    with pytest.raises(ValueError):
        count("everything", 2, 2)


@pytest.mark.task3_4
def test_fan_in_init(impl):
    # seed 0; k = 64, n = 1024: 65536 entries, so the sample variance has relative standard error
    # sqrt(2 / 65536) = 0.55%; a 5% band is 9 standard errors wide, yet rejects N(0, 1/k) (16x) and
    # Xavier (1.9x). The projected-key check uses 64 x 32 products of 1024 terms (5% band, same reasoning).
    E = impl("ex03_linformer").fan_in_init(64, 1024, torch.Generator().manual_seed(0))
    assert E.shape == (64, 1024) and E.dtype == torch.float64
    assert abs(E.mean().item()) < 5 / math.sqrt(65536) / math.sqrt(1024)
    assert abs(E.var().item() * 1024 - 1) < 0.05
    keys = rand(1024, 32, seed=11)
    assert abs((E @ keys).var().item() / keys.var().item() - 1) < 0.1
    again = impl("ex03_linformer").fan_in_init(64, 1024, torch.Generator().manual_seed(0))
    assert torch.equal(E, again)  # drawn from the generator, so reproducible
