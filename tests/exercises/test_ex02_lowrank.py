"""Grades exercises/ex02_lowrank.py (or solutions/ with --impl solutions) against minilin.lowrank."""
import pytest
import torch

from minilin import lowrank

TOL = 1e-10  # float64: only round-off separates a correct answer from the reference


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def spectrum(*batch, n=12, seed=0):
    return lowrank.singular_values(torch.softmax(rand(*batch, n, n, seed=seed) * 2, dim=-1))


@pytest.mark.task2_1
def test_cumulative_energy(impl):
    s = spectrum(2, 3, seed=1)
    got = impl("ex02_lowrank").cumulative_energy(s)
    assert got.shape == s.shape
    torch.testing.assert_close(got, lowrank.cumulative_energy(s), rtol=0, atol=TOL)
    known = torch.tensor([3.0, 2.0, 1.0, 1.0, 1.0], dtype=torch.float64)  # squares 9 4 1 1 1, total 16
    torch.testing.assert_close(impl("ex02_lowrank").cumulative_energy(known),
                               torch.tensor([9, 13, 14, 15, 16], dtype=torch.float64) / 16, rtol=0, atol=TOL)


@pytest.mark.task2_2
@pytest.mark.parametrize("threshold", [0.5, 0.9, 0.99, 1.0])
def test_rank_at_energy(impl, threshold):
    s = spectrum(4, seed=2)
    got = impl("ex02_lowrank").rank_at_energy(s, threshold)
    assert torch.equal(got.long(), lowrank.rank_at_energy(s, threshold))
    known = torch.tensor([3.0, 2.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    assert int(impl("ex02_lowrank").rank_at_energy(known, 0.8)) == 2  # 13/16 = 0.8125 >= 0.8


@pytest.mark.task2_3
def test_effective_rank(impl):
    effective_rank = impl("ex02_lowrank").effective_rank
    s = spectrum(3, seed=3)
    torch.testing.assert_close(effective_rank(s), lowrank.effective_rank(s), rtol=0, atol=TOL)
    assert abs(float(effective_rank(torch.ones(7, dtype=torch.float64))) - 7) < TOL
    with_zeros = torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64)
    assert abs(float(effective_rank(with_zeros)) - 1) < TOL  # 0·log 0 = 0, no NaN


@pytest.mark.task2_4
@pytest.mark.parametrize("r", [1, 3, 8])
def test_best_rank_approx(impl, r):
    P = rand(2, 8, 8, seed=4)
    got = impl("ex02_lowrank").best_rank_approx(P, r)
    torch.testing.assert_close(got, lowrank.best_rank_approx(P, r), rtol=0, atol=TOL)
    assert (torch.linalg.matrix_rank(got) == r).all()


@pytest.mark.task2_5
def test_jl_context(impl):
    P = torch.softmax(rand(2, 16, 16, seed=5), dim=-1)
    v, R = rand(2, 16, 3, seed=6), rand(5, 16, seed=7) / 5 ** 0.5
    got = impl("ex02_lowrank").jl_context(P, v, R)
    torch.testing.assert_close(got, P @ (R.T @ R) @ v, rtol=0, atol=TOL)
    # no n x n product: run it on meta tensors (shapes only) and record the shape of every matmul-like result
    products = []
    matmuls = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "tensordot", "linear"}

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") in matmuls and isinstance(out, torch.Tensor):
                products.append(tuple(out.shape[-2:]))
            return out

    n = 4096
    with Spy():
        impl("ex02_lowrank").jl_context(torch.empty(n, n, device="meta"), torch.empty(n, 8, device="meta"),
                                        torch.empty(16, n, device="meta"))
    assert products and (n, n) not in products, f"an n x n product was formed: {products}"
