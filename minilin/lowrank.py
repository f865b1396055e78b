"""Is attention low rank? Singular-value spectra of attention matrices and random-projection (JL) errors.

The attention ("context mapping") matrix P = softmax(Q Kᵀ / √d) is (n × n). Linformer's starting point
(Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity", arXiv 2006.04768, Fig. 1 and
Theorem 1) is that P is close to a matrix of rank k ≪ n. This module measures how close:

    singular_values(P)            batched spectra, (..., n, m) -> (..., min(n, m)), descending
    cumulative_energy(s)          Σ_{i<=r} s_i² / Σ s_i²   (power=1: the paper's "normalized cumulative
                                  singular value"); by Eckart-Young 1 - energy(r) is the squared relative
                                  Frobenius error of the best rank-r approximation
    rank_at_energy(s, 0.9)        the smallest r whose energy reaches the threshold
    effective_rank(s)             exp(entropy of s / Σ s) (Roy & Vetterli 2007) or the stable rank
    jl_context_error(q, k, v, ks) error of three rank-k stand-ins for the context P V, as a function of k

Shapes follow minilin.attention: q, k (B, H, n, D), v (B, H, n, Dv); spectra are computed per (b, h).
"""
import math

import torch

from minilin.attention import attention_matrix


def singular_values(P):
    """Singular values of each matrix in a batch, largest first, in float64: (..., n, m) -> (..., min(n, m))."""
    if P.ndim < 2:
        raise ValueError(f"P must be a (..., n, m) batch of matrices, got shape {tuple(P.shape)}")
    return torch.linalg.svdvals(P.detach().to(torch.float64))


def cumulative_energy(s, power=2):
    """Normalised cumulative energy of a spectrum: (..., r) -> (..., r), increasing, last entry 1.

    power=2: energy Σ_{i<=j} s_i² / Σ s_i² (1 - energy = squared relative Frobenius error of the best rank-j
    approximation, Eckart-Young). power=1: the Linformer paper's "normalized cumulative singular value".
    """
    if power not in (1, 2):
        raise ValueError(f"power must be 1 (cumulative singular values, as in the paper's Fig. 1) or 2 (energy), "
                         f"got {power!r}")
    w = s.to(torch.float64) ** power
    return w.cumsum(-1) / w.sum(-1, keepdim=True)


def energy_at(s, k, power=2):
    """Cumulative energy captured by the first k singular values: (..., r) -> (...). k >= r gives 1."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    e = cumulative_energy(s, power)
    return e[..., min(k, e.shape[-1]) - 1]


def rank_at_energy(s, threshold=0.9, power=2):
    """Smallest r such that the first r singular values hold `threshold` of the energy: (..., r) -> (...) int64."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold is a fraction of the energy in (0, 1], got {threshold}")
    e = cumulative_energy(s, power)
    # a tolerance so that threshold=1.0 is reached despite round-off in the cumulative sum
    return (e < threshold - 1e-12).sum(-1) + 1


def effective_rank(s, kind="entropy"):
    """A real-valued rank: (..., r) -> (...).

    kind="entropy": exp(H(p)) with p = s / Σ s (Roy & Vetterli 2007, "The effective rank: a measure of
    effective dimensionality"); equals r for r equal singular values and 1 for a rank-1 matrix.
    kind="stable": Σ s² / s_1² = ‖P‖_F² / ‖P‖_2², a lower bound on the rank that ignores tiny tails.
    """
    s = s.to(torch.float64)
    if kind == "entropy":
        p = s / s.sum(-1, keepdim=True)
        h = -(p * torch.log(torch.where(p > 0, p, torch.ones_like(p)))).sum(-1)  # 0·log 0 = 0
        return torch.exp(h)
    if kind == "stable":
        return (s ** 2).sum(-1) / s[..., 0] ** 2
    raise ValueError(f"kind must be 'entropy' or 'stable', got {kind!r}")


def best_rank_approx(P, r):
    """Best rank-r approximation of each matrix (Eckart-Young, truncated SVD): (..., n, m) -> (..., n, m)."""
    U, S, Vh = torch.linalg.svd(P, full_matrices=False)
    return (U[..., :r] * S[..., None, :r]) @ Vh[..., :r, :]


def attention_spectrum(q, k, *, mask=None, causal=False):
    """Singular values of every head's attention matrix: q, k (B, H, n, D) -> (B, H, min(n, M)) float64."""
    return singular_values(attention_matrix(q, k, mask=mask, causal=causal))


def jl_context_error(q, k, v, ks, *, generator, trials=3, linformer_init="fan_in"):
    """Relative error ‖Â − P V‖_F / ‖P V‖_F of three rank-k stand-ins for the context P V, for each k in ks.

    q, k: (B, H, n, D)  v: (B, H, n, Dv). For each k (mean and standard deviation over `trials` draws):
      "svd"        P_k V with P_k the best rank-k approximation of P (truncated SVD): the best rank-k P̃ chosen
                   without looking at V (it minimises E‖(P̃ − P) V‖² for V with independent entries). Not a floor
                   for a given V: P V has rank <= Dv, so the rank-Dv matrix P̃ = P V V⁺ reproduces it exactly
      "jl"         P Rᵀ R V with R (k, n), entries N(0, 1/k): the random projection in the proof of the
                   paper's Theorem 1 (E[Rᵀ R] = I), applied *outside* the softmax. Its expected squared relative
                   error is (‖P‖²‖V‖² / ‖PV‖² + 1) / k, about (n + 1) / k for random V: JL bounds the error
                   additively (ε‖p‖‖w‖), not relative to the context as the theorem states
      "linformer"  softmax(Q (E K)ᵀ / √D) (F V) with E, F (k, n) independent Gaussian, drawn as
                   `minilin.linformer.init_projection_(..., linformer_init)`: Linformer with untrained E, F
                   (not the construction in the proof of Theorem 2, which uses one R: E = δR, F = e^(−δ) R)
    Returns a list of dicts {"k", "svd", "jl", "jl_std", "linformer", "linformer_std"} (floats).
    """
    from minilin.linformer import init_projection_, linformer_attention
    n = k.shape[2]
    if any(kk < 1 for kk in ks):
        raise ValueError(f"every k must be >= 1, got {list(ks)}")
    q, k, v = (t.detach().to(torch.float64) for t in (q, k, v))
    P = attention_matrix(q, k)  # (B, H, n, n)
    exact = P @ v  # (B, H, n, Dv)
    norm = exact.norm()
    U, S, Vh = torch.linalg.svd(P, full_matrices=False)
    rows = []
    for kk in ks:
        r = min(kk, n)
        P_r = (U[..., :r] * S[..., None, :r]) @ Vh[..., :r, :]
        row = {"k": int(kk), "svd": float((P_r @ v - exact).norm() / norm)}
        jl, lin = [], []
        for _ in range(trials):
            R = torch.randn(kk, n, generator=generator, dtype=torch.float64) / math.sqrt(kk)
            jl.append(float(((P @ R.T) @ (R @ v) - exact).norm() / norm))  # (B,H,n,k)@(B,H,k,Dv), never n x n
            E = init_projection_(torch.empty(kk, n, dtype=torch.float64), linformer_init, generator=generator)
            F = init_projection_(torch.empty(kk, n, dtype=torch.float64), linformer_init, generator=generator)
            lin.append(float((linformer_attention(q, k, v, E, F) - exact).norm() / norm))
        jl, lin = torch.tensor(jl), torch.tensor(lin)
        row.update(jl=float(jl.mean()), jl_std=float(jl.std()) if trials > 1 else 0.0,
                   linformer=float(lin.mean()), linformer_std=float(lin.std()) if trials > 1 else 0.0)
        rows.append(row)
    return rows
