"""What the unit tests share: one random-tensor helper, one tolerance, the (B, H, N, D) triple maker.

Import as `from helpers import TOL, gen, qkv, rand` (pytest puts tests/ on sys.path: see tests/conftest.py,
which also holds the `one_thread` fixture).
"""
import torch

# float64 round-off over a few dozen O(1) terms is ~1e-15; 1e-10 leaves room and still catches any real
# error (a wrong scale or normaliser, a missing mask, an off-by-one causal mask: O(1e-3) or larger).
TOL = 1e-10


def gen(seed=0):
    """An explicit CPU generator: every test draws from its own, never from the global RNG."""
    return torch.Generator().manual_seed(seed)


def rand(*shape, seed=0, dtype=torch.float64, scale=1.0):
    """N(0, scale²) tensor of `shape` from generator seed `seed`."""
    return torch.randn(*shape, generator=gen(seed), dtype=dtype) * scale


def qkv(B=2, H=3, N=6, M=None, D=4, Dv=None, seed=0, dtype=torch.float64, scale=1.0):
    """q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv) from one generator; q and k scaled by `scale`."""
    g = gen(seed)
    M = N if M is None else M
    Dv = D if Dv is None else Dv
    return (scale * torch.randn(B, H, N, D, generator=g, dtype=dtype),
            scale * torch.randn(B, H, M, D, generator=g, dtype=dtype),
            torch.randn(B, H, M, Dv, generator=g, dtype=dtype))
