"""Grades exercises/ex04_performer.py (or solutions/ with --impl solutions) against minilin.performer."""
import math

import pytest
import torch

from minilin.performer import causal_linear_attention, favor_attention, gaussian_projection, positive_features
from minilin.probes import future_leakage

TOL = 1e-10  # float64: only round-off separates a correct answer from the reference


def gen(seed):
    return torch.Generator().manual_seed(seed)


def rand(*shape, seed=0, scale=1.0):
    return scale * torch.randn(*shape, generator=gen(seed), dtype=torch.float64)


@pytest.mark.task4_1
def test_positive_random_features(impl):
    x = rand(2, 3, 5, 4, seed=1, scale=0.7)
    w = gaussian_projection(6, 4, generator=gen(2), dtype=torch.float64)
    got = impl("ex04_performer").positive_random_features(x, w)
    assert got.shape == (2, 3, 5, 6)
    ref = positive_features(x, w, is_query=False, stabilize=False, normalize=False)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=0)


@pytest.mark.task4_1
def test_positive_random_features_are_unbiased(impl):
    # Seed 3/4: 20000 features of d=3 for 2 pairs; the mean of φ(x)·φ(y) over 200 groups of 100 features
    # must be within 4 standard errors of exp(xᵀy).
    f = impl("ex04_performer").positive_random_features
    x, y = rand(2, 3, seed=3, scale=0.5), rand(2, 3, seed=4, scale=0.5)
    w = torch.randn(20000, 3, generator=gen(5), dtype=torch.float64)
    est = (f(x, w) * f(y, w)).view(2, 200, 100).sum(-1) * 200  # (pairs, groups): each group an m=100 estimate
    truth = torch.exp((x * y).sum(-1))
    se = est.std(-1) / math.sqrt(200)
    assert ((est.mean(-1) - truth).abs() <= 4 * se).all()


@pytest.mark.task4_2
def test_orthogonal_projection(impl):
    w = impl("ex04_performer").orthogonal_projection(10, 4, gen(6))
    assert w.shape == (10, 4) and w.dtype == torch.float64
    unit = w / w.norm(dim=1, keepdim=True)
    for block in (unit[0:4], unit[4:8], unit[8:10]):  # rows of a block are orthonormal after normalising
        torch.testing.assert_close(block @ block.T, torch.eye(len(block), dtype=torch.float64), rtol=0, atol=1e-12)
    assert float((unit[0:4] @ unit[4:8].T).abs().max()) > 1e-3  # blocks are independent draws
    assert w.norm(dim=1).std() > 0.05  # lengths are random (chi), not all √D
    again = impl("ex04_performer").orthogonal_projection(10, 4, gen(6))
    assert torch.equal(w, again)  # all randomness comes from the generator


@pytest.mark.task4_2
def test_orthogonal_projection_rows_are_gaussian(impl):
    # E[w wᵀ] = I for a row with a uniform direction and chi(D) length (unit rows would give I/3).
    # Seed 7, 900 rows of D=3: entries of the sample second moment have standard error <= sqrt(2/900)
    # = 0.047; 0.2 is > 4 of them, and 3x smaller than the I/3 mistake.
    w = impl("ex04_performer").orthogonal_projection(900, 3, gen(7))
    torch.testing.assert_close(w.T @ w / 900, torch.eye(3, dtype=torch.float64), rtol=0, atol=0.2)
    assert abs(float(w.mean())) < 0.2


@pytest.mark.task4_3
def test_favor_noncausal(impl):
    q, k, v = rand(2, 2, 7, 8, seed=8), rand(2, 2, 9, 8, seed=9), rand(2, 2, 9, 3, seed=10)
    w = gaussian_projection(16, 8, generator=gen(11), dtype=torch.float64)
    got = impl("ex04_performer").favor_noncausal(q, k, v, w)
    assert got.shape == (2, 2, 7, 3)
    torch.testing.assert_close(got, favor_attention(q, k, v, w), rtol=0, atol=TOL)


@pytest.mark.task4_3
def test_favor_noncausal_is_stable_in_float32(impl):
    g = gen(12)
    q, k = (torch.empty(1, 2, 30, 16).uniform_(-20, 20, generator=g) for _ in range(2))
    v = torch.randn(1, 2, 30, 4, generator=g)
    w = gaussian_projection(32, 16, generator=gen(13))
    got = impl("ex04_performer").favor_noncausal(q, k, v, w)  # exp(Wx) alone would overflow float32
    assert torch.isfinite(got).all()
    ref = favor_attention(q.double(), k.double(), v.double(), w.double())
    ok = torch.isfinite(ref).all(-1) & (ref.abs().sum(-1) > 0)  # rows that float64 itself resolves
    torch.testing.assert_close(got.double()[ok], ref[ok], rtol=0, atol=1e-3)


@pytest.mark.task4_4
def test_causal_linear_attention(impl):
    g = gen(14)
    phi_q, phi_k = torch.rand(2, 3, 11, 5, generator=g, dtype=torch.float64), torch.rand(2, 3, 11, 5, generator=g,
                                                                                            dtype=torch.float64)
    v = torch.randn(2, 3, 11, 4, generator=g, dtype=torch.float64)
    got = impl("ex04_performer").causal_linear_attention(phi_q, phi_k, v)
    assert got.shape == (2, 3, 11, 4)
    torch.testing.assert_close(got, causal_linear_attention(phi_q, phi_k, v, chunk_size=4), rtol=0, atol=TOL)
    a = (phi_q @ phi_k.transpose(-2, -1)).tril()  # the quadratic form it must equal
    torch.testing.assert_close(got, (a / a.sum(-1, keepdim=True)) @ v, rtol=0, atol=TOL)


@pytest.mark.task4_4
def test_causal_linear_attention_does_not_leak(impl):
    f = impl("ex04_performer").causal_linear_attention
    g = gen(15)
    pq, pk = torch.rand(1, 1, 8, 4, generator=g, dtype=torch.float64), torch.rand(1, 1, 8, 4, generator=g,
                                                                                  dtype=torch.float64)
    f(pq, pk, torch.randn(1, 1, 8, 2, dtype=torch.float64))  # a stub fails here, before the probe runs
    # the probe feeds x (1, 8, 2) as the values; features fixed: output t may depend on x[:t+1] only
    leak = future_leakage(lambda x: f(pq, pk, x[:, None])[:, 0], torch.randn(1, 8, 2, dtype=torch.float64),
                          generator=gen(16))
    assert leak == 0.0
