"""What the unit tests share: one random-tensor helper, one tolerance, the (B, H, N, D) triple maker.

Import as `from helpers import TOL, gen, qkv, rand` (pytest puts tests/ on sys.path: see tests/conftest.py,
which also holds the `one_thread` fixture).
"""
import torch
from hypothesis import strategies as st

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


@st.composite
def attention_inputs(draw, max_heads=3, max_d=5, max_dv=5):
    """Property-test inputs (q, k, v, mask or None, causal): small random shapes, N != M allowed, float64."""
    B, H = draw(st.integers(1, 2)), draw(st.integers(1, max_heads))
    N, M = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    D, Dv = draw(st.integers(1, max_d)), draw(st.integers(1, max_dv))
    causal = draw(st.booleans())
    use_mask = draw(st.booleans())
    mask_bits = draw(st.lists(st.booleans(), min_size=B * M, max_size=B * M))
    q, k, v = qkv(B, H, N, M, D, Dv, seed=draw(st.integers(0, 2**16)))
    return q, k, v, (torch.tensor(mask_bits).view(B, M) if use_mask else None), causal
