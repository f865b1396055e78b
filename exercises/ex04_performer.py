"""Exercises for notebook 04: Performer (FAVOR+) from scratch.

Implement each function, then grade yourself:  python -m minilin grade --chapter 4
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); a projection is an
(m, D) matrix whose rows are the random directions w_i. Do not call minilin.performer here.
Reference: "Rethinking Attention with Performers", Choromanski et al. 2020, arXiv 2009.14794.
"""
import torch


def positive_random_features(x, projection):
    """Task 4.1: Lemma 1's positive random features φ(x) = exp(Wx − |x|²/2) / √m.

    x: (..., N, D), projection W: (m, D)  ->  (..., N, m)
    With rows w_i ~ N(0, I_D), φ(x)·φ(y) is an unbiased estimate of exp(xᵀy). No D^(-1/4) scaling here
    and no stabilisation: the plain formula. Hint: `x @ projection.T` and `(x * x).sum(-1, keepdim=True)`.
    """
    raise NotImplementedError("Task 4.1")


def orthogonal_projection(nb_features, dim, generator):
    """Task 4.2: a block-orthogonal Gaussian projection (m, D), as in the paper's Theorem 3.

    Stack ceil(m / D) independent blocks; each block is D orthonormal rows: the Q of
    `torch.linalg.qr(torch.randn(D, D, generator=generator, dtype=torch.float64))` (transposed; multiply
    Q's columns by sign(diag(R)) to make it uniformly distributed). Keep the first m rows, then give
    every row an independent length drawn from chi(D): the norm of a fresh
    `torch.randn(D, generator=generator, dtype=torch.float64)`. Return float64.
    Each row is then marginally N(0, I_D) (so estimates stay unbiased) while rows of a block are orthogonal.
    """
    raise NotImplementedError("Task 4.2")


def favor_noncausal(q, k, v, projection):
    """Task 4.3: non-causal FAVOR+ attention, approximating softmax(q kᵀ/√D) v in O(N·m·D).

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), projection: (m, D)  ->  (B, H, N, Dv)
    1. scale q and k by D^(-1/4) (then φ(q')·φ(k') estimates exp(qᵀk/√D));
    2. positive features, stabilised: subtract from each *query row's* exponents its max over features,
       and from all *key* exponents one max over every key and feature (both cancel in the ratio;
       detach them). Inputs with |x| up to 20 must not overflow float32;
    3. out = φ(Q) (φ(K)ᵀ V) / φ(Q) (φ(K)ᵀ 1): never form the (N, M) matrix.
    """
    raise NotImplementedError("Task 4.3")


def causal_linear_attention(phi_q, phi_k, v):
    """Task 4.4: causal linear attention from given (positive) features, by prefix sums.

    phi_q: (B, H, N, m), phi_k: (B, H, N, m), v: (B, H, N, Dv)  ->  (B, H, N, Dv)
    out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i, with the prefix sums S_i = Σ_{j≤i} φ(k_j) v_jᵀ (m × Dv)
    and z_i = Σ_{j≤i} φ(k_j) (m).
    A loop over positions with a running (m × Dv) state is the simplest correct answer (that is the RNN
    view of "Transformers are RNNs", arXiv 2006.16236); output i must not depend on positions j > i.
    """
    raise NotImplementedError("Task 4.4")
