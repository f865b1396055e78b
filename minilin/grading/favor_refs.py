"""float64 references for chapter 4's checks (minilin/grading/ex04_performer.py): the hyperbolic features and
their variance, loop forms of causal, windowed and bottom-right linear attention, what float32 resolves under
Task 4.5's stabiliser, and the MSEs of Lemma 2 and Theorem 2 (arXiv 2009.14794)."""
import math

import torch

from minilin.performer import positive_features


def hyperbolic(x, w):
    """exp(−|x|²/2) / √(2m) · [exp(Wx), exp(−Wx)]: the paper's positive hyperbolic features, (..., N, 2m)."""
    proj = x @ w.T
    return torch.cat([torch.exp(proj), torch.exp(-proj)], -1) * torch.exp(-0.5 * (x * x).sum(-1, keepdim=True)) \
        / math.sqrt(2 * w.shape[0])


def hyperbolic_var(x, y, m):
    """The exact variance of the m-direction hyperbolic estimate: (1 − e^(−|x+y|²))/2 times Lemma 2's φ+ variance."""
    s2 = ((x + y) ** 2).sum(-1)
    return torch.exp(2 * (x * y).sum(-1)) * torch.expm1(s2) * -torch.expm1(-s2) / (2 * m)


def masked_quadratic(phi_q, phi_k, v):
    """Loop reference: query i (of N) sees keys j <= i + M - N (bottom-right aligned)."""
    N, M = phi_q.shape[2], phi_k.shape[2]
    out = torch.zeros(*phi_q.shape[:3], v.shape[-1], dtype=torch.float64)
    for i in range(N):
        a = phi_q[:, :, i:i + 1] @ phi_k[:, :, :i + M - N + 1].transpose(-2, -1)  # (B, H, 1, visible)
        out[:, :, i] = ((a / a.sum(-1, keepdim=True)) @ v[:, :, :i + M - N + 1])[:, :, 0]
    return out


def window_quadratic(phi_q, phi_k, v, window):
    """Loop reference: query i sees keys i − window < j <= i."""
    out = torch.zeros(*phi_q.shape[:3], v.shape[-1], dtype=torch.float64)
    for i in range(phi_q.shape[2]):
        lo = max(0, i - window + 1)
        a = phi_q[:, :, i:i + 1] @ phi_k[:, :, lo:i + 1].transpose(-2, -1)  # (B, H, 1, visible)
        out[:, :, i] = ((a / a.sum(-1, keepdim=True)) @ v[:, :, lo:i + 1])[:, :, 0]
    return out


def unstabilised_causal(q, k, v, w):
    """float64 spec of causal FAVOR+: plain positive features of x' = x D^(-1/4), then a loop over queries."""
    pq, pk = (positive_features(x, w, is_query=False, stabilize=False) for x in (q, k))  # scaling: D^(-1/4)
    return masked_quadratic(pq, pk, v)


def float32_reach(q, k, v, w):
    """Causal FAVOR+ in float64 with what float32 loses under the task's stabiliser dropped: a key's feature
    exp(e_k - r_i) (r_i: the running maximum) or a query's share exp(e_q - max e_q)·Σ_j exp(e_k - r_i) below
    float32's smallest normal. Where this differs from the exact result (about 1 row in 2000 of fresh draws with
    entries up to ±20), a correct float32 answer cannot match it either, so the check leaves the row out."""
    q, k, v, w = (t.double() for t in (q, k, v, w))
    eq, ek = (x @ w.T * x.shape[-1] ** -0.25 - 0.5 * (x * x).sum(-1, keepdim=True) / x.shape[-1] ** 0.5 for x in (q, k))
    r = torch.cummax(ek.amax(-1), -1).values  # (B, H, N)
    later = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).triu(1)[..., None]  # (i, j, 1): j > i
    tiny = torch.finfo(torch.float32).tiny
    pk = torch.exp(ek[..., None, :, :] - r[..., None, None]).masked_fill(later, 0.0)  # (B, H, i, j, m)
    pk = pk.masked_fill(pk < tiny, 0.0)
    pq = torch.exp(eq - eq.amax(-1, keepdim=True))
    pq = pq * (pq * pk.sum(-2) >= tiny)
    return torch.einsum("bhim,bhijm,bhjd->bhid", pq, pk, v) / (pq * pk.sum(-2)).sum(-1, keepdim=True)


def lemma2_mse(x, y, m):
    return float(torch.exp(2 * (x @ y)) * torch.expm1((x + y) @ (x + y)) / m)


def theorem2_cap(x, y, m, d):
    """Theorem 2's bound on the orthogonal MSE, divided by Lemma 2's iid MSE (one block: m <= d)."""
    s2 = float((x + y) @ (x + y))
    return 1 - 2 * (m - 1) / (d + 2) * (1 - math.exp(-s2 / 2)) ** 2 / math.expm1(s2)
