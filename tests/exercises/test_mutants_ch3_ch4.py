"""Planted wrong answers for chapters 3 and 4: each must fail its task's public checks.

The pattern of MUTANTS in tests/exercises/test_exercises.py: a plausible wrong version of one task function
(a constant hard-coded for one shape, a quadratic form, a stabiliser that reads ahead), graded in-process.
"""

import importlib.util

import pytest
from mutants import assert_fails

from minilin.grading.course import TASKS
from minilin.grading.runner import run_in_process


FAVOR_EXPONENTS = (
    "import math\nimport torch\n"
    "def exponents(q, k, projection, d):\n"
    "    w = projection.to(q.dtype) * d ** -0.25\n"
    "    qs, ks = q * d ** -0.25, k * d ** -0.25\n"
    "    eq = q @ w.T - 0.5 * (qs * qs).sum(-1, keepdim=True)\n"
    "    ek = k @ w.T - 0.5 * (ks * ks).sum(-1, keepdim=True)\n"
    "    return eq, ek\n")

RECURRENCE = (  # Task 4.4's loop, reading out query i after adding key `first + i`
    "def recurrence(phi_q, phi_k, v, state, z, first):\n"
    "    outs = []\n"
    "    for i in range(phi_q.shape[2]):\n"
    "        state = state + phi_k[:, :, first + i, :, None] * v[:, :, first + i, None, :]\n"
    "        z = z + phi_k[:, :, first + i]\n"
    "        outs.append((phi_q[:, :, i, :, None] * state).sum(-2) / (phi_q[:, :, i] * z).sum(-1, keepdim=True))\n"
    "    return torch.stack(outs, dim=2)\n")

HYP_FEATURES = (  # Task 4.1's features, done right: the notebook's φ+ on the rows [W; −W]
    "import math\nimport torch\n"
    "def hyperbolic_random_features(x, projection):\n"
    "    w = torch.cat([projection, -projection])\n"
    "    return torch.exp(x @ w.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(w.shape[0])\n")

HYP_VARIANCE = (  # Task 4.1's variance, done right
    "import math\nimport torch\n"
    "def hyperbolic_variance(x, y, nb_features):\n"
    "    s2 = ((x + y) ** 2).sum(-1)\n"
    "    return torch.exp(2 * (x * y).sum(-1)) * torch.expm1(s2) * -torch.expm1(-s2) / (2 * nb_features)\n")

ORTHO = (  # Task 4.2's projection, done right
    "import torch\n"
    "def orthogonal_projection(nb_features, dim, generator):\n"
    "    nb_blocks = -(-nb_features // dim)\n"
    "    q, r = torch.linalg.qr(torch.randn(nb_blocks, dim, dim, generator=generator, dtype=torch.float64))\n"
    "    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]\n"
    "    w = q.transpose(-2, -1).reshape(nb_blocks * dim, dim)[:nb_features]\n"
    "    return w * torch.randn(nb_features, dim, generator=generator, dtype=torch.float64).norm(dim=-1)[:, None]\n")

MUTANTS = {
    # id: (task, source of a wrong version)
    "3.2-scale-hard-coded-for-D-4": ("3.2", (
        "import torch\n"
        "def linformer_forward(q, k, v, E, F, mask=None):\n"
        "    M = k.shape[2]\n"
        "    if M > E.shape[-1] or M > F.shape[-1]:\n"
        "        raise ValueError('too long')\n"
        "    if mask is not None:\n"
        "        k = k.masked_fill(~mask[:, None, :, None], 0.0)\n"
        "        v = v.masked_fill(~mask[:, None, :, None], 0.0)\n"
        "    kp, vp = E[..., :M] @ k, F[..., :M] @ v\n"
        "    return torch.softmax(q @ kp.transpose(-2, -1) / 2.0, -1) @ vp\n")),
    "3.2-length-hard-coded-M-6": ("3.2", (
        "import math\nimport torch\n"
        "def linformer_forward(q, k, v, E, F, mask=None):\n"
        "    if k.shape[2] > E.shape[-1]:\n"
        "        raise ValueError('too long')\n"
        "    if mask is not None:\n"
        "        k = k.masked_fill(~mask[:, None, :, None], 0.0)\n"
        "        v = v.masked_fill(~mask[:, None, :, None], 0.0)\n"
        "    kp, vp = E[..., :6] @ k[:, :, :6], F[..., :6] @ v[:, :, :6]\n"
        "    return torch.softmax(q @ kp.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ vp\n")),
    "3.1-equal-windows-last-takes-the-rest": ("3.1", (
        "import torch\n"
        "def mean_pool_projection(k, n, dtype=torch.float64):\n"
        "    if not 1 <= k <= n:\n"
        "        raise ValueError('k')\n"
        "    E, w = torch.zeros(k, n, dtype=dtype), n // k\n"
        "    for j in range(k):\n"
        "        end = n if j == k - 1 else (j + 1) * w\n"
        "        E[j, j * w:end] = 1.0 / (end - j * w)\n"
        "    return E\n")),
    "3.3-first-k-positions-as-slots": ("3.3", (
        "import torch\n"
        "def slot_probe_r2(x, coeffs, k):\n"
        "    A = torch.cat([x[:, :k], torch.ones_like(x[:, :1])], dim=1)\n"
        "    W = torch.linalg.lstsq(A, coeffs).solution\n"
        "    return float(1 - ((A @ W - coeffs) ** 2).sum() / ((coeffs - coeffs.mean(0)) ** 2).sum())\n")),
    "3.3-the-k-over-2f-rule": ("3.3", (
        "def slot_probe_r2(x, coeffs, k):\n"
        "    return min(1.0, k / coeffs.shape[1])\n")),
    "3.4-hard-coded-8": ("3.4", (
        "def slots_needed(x, coeffs, share):\n"
        "    return 8\n")),
    "3.4-one-slot-per-coefficient-whatever-the-share": ("3.4", (
        "def slots_needed(x, coeffs, share):\n"
        "    return coeffs.shape[1]\n")),
    "3.5-own-window-unmasked-reads-ahead": ("3.5", (
        "import math\nimport torch\n"
        "def causal_window_linformer(q, k, v, window):\n"
        "    if window < 1:\n"
        "        raise ValueError('window')\n"
        "    n, outs = k.shape[2], []\n"
        "    for start in range(0, n, window):\n"
        "        stop, done = min(start + window, n), start // window\n"
        "        kp = k[:, :, :start].unflatten(2, (done, window)).mean(3)\n"
        "        vp = v[:, :, :start].unflatten(2, (done, window)).mean(3)\n"
        "        keys, vals = torch.cat([kp, k[:, :, start:stop]], 2), torch.cat([vp, v[:, :, start:stop]], 2)\n"
        "        s = q[:, :, start:stop] @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "        outs.append(s.softmax(-1) @ vals)\n"
        "    return torch.cat(outs, 2)\n")),
    "3.5-exact-causal-attention-no-pooling": ("3.5", (
        "from minilin.attention import softmax_attention\n"
        "def causal_window_linformer(q, k, v, window):\n"
        "    if window < 1:\n"
        "        raise ValueError('window')\n"
        "    return softmax_attention(q, k, v, causal=True)\n")),
    "3.5-past-slots-only-the-appendix-mask": ("3.5", (
        "import math\nimport torch\n"
        "def causal_window_linformer(q, k, v, window):\n"
        "    if window < 1:\n"
        "        raise ValueError('window')\n"
        "    n, outs = k.shape[2], []\n"
        "    for start in range(0, n, window):\n"
        "        stop, done = min(start + window, n), start // window\n"
        "        if done == 0:\n"
        "            outs.append(torch.zeros(*q.shape[:2], stop - start, v.shape[-1], dtype=q.dtype))\n"
        "            continue\n"
        "        kp = k[:, :, :start].unflatten(2, (done, window)).mean(3)\n"
        "        vp = v[:, :, :start].unflatten(2, (done, window)).mean(3)\n"
        "        s = q[:, :, start:stop] @ kp.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "        outs.append(s.softmax(-1) @ vp)\n"
        "    return torch.cat(outs, 2)\n")),
    "3.6-self-attention-count-8nkd": ("3.6", (
        "def linformer_matmul_flops(batch, heads, n, m, d, dv, proj_len):\n"
        "    return 8 * batch * heads * n * proj_len * d\n")),
    "4.2-no-sign-fix": ("4.2", (
        "import torch\n"
        "def orthogonal_projection(nb_features, dim, generator):\n"
        "    blocks = [torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))[0].T\n"
        "              for _ in range(-(-nb_features // dim))]\n"
        "    w = torch.cat(blocks)[:nb_features]\n"
        "    g = torch.randn(nb_features, dim, generator=generator, dtype=torch.float64)\n"
        "    return w * g.norm(dim=1, keepdim=True)\n")),
    "4.2-one-length-per-block": ("4.2", (
        "import torch\n"
        "def orthogonal_projection(nb_features, dim, generator):\n"
        "    blocks = []\n"
        "    for _ in range(-(-nb_features // dim)):\n"
        "        q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))\n"
        "        length = torch.randn(dim, generator=generator, dtype=torch.float64).norm()\n"
        "        blocks.append((q * torch.sign(torch.diagonal(r))).T * length)\n"
        "    return torch.cat(blocks)[:nb_features]\n")),
    "4.3-dimension-hard-coded-D-8": ("4.3", FAVOR_EXPONENTS + (
        "def favor_noncausal(q, k, v, projection):\n"
        "    eq, ek = exponents(q, k, projection, 8)\n"
        "    pq = torch.exp(eq - eq.amax(-1, keepdim=True))\n"
        "    pk = torch.exp(ek - ek.amax(dim=(-2, -1), keepdim=True))\n"
        "    return (pq @ (pk.transpose(-2, -1) @ v)) / (pq @ pk.sum(-2)[..., None])\n")),
    "4.3-quadratic-attention-matrix": ("4.3", FAVOR_EXPONENTS + (
        "def favor_noncausal(q, k, v, projection):\n"
        "    eq, ek = exponents(q, k, projection, q.shape[-1])\n"
        "    pq = torch.exp(eq - eq.amax(-1, keepdim=True))\n"
        "    pk = torch.exp(ek - ek.amax(dim=(-2, -1), keepdim=True))\n"
        "    a = pq @ pk.transpose(-2, -1)\n"
        "    return (a @ v) / a.sum(-1, keepdim=True)\n")),
    "4.4-quadratic-window-mask": ("4.4", (
        "import torch\n"
        "def sliding_window_linear_attention(phi_q, phi_k, v, window):\n"
        "    a = (phi_q @ phi_k.transpose(-2, -1)).tril().triu(1 - window)\n"
        "    return (a / a.sum(-1, keepdim=True)) @ v\n")),
    "4.4-window-ignored": ("4.4", "import torch\n" + RECURRENCE + (
        "def sliding_window_linear_attention(phi_q, phi_k, v, window):\n"
        "    B, H, N, m = phi_q.shape\n"
        "    return recurrence(phi_q, phi_k, v, phi_q.new_zeros(B, H, m, v.shape[-1]), phi_q.new_zeros(B, H, m), 0)\n"
    )),
    "4.4-window-one-too-long": ("4.4", (
        "import torch\n"
        "def sliding_window_linear_attention(phi_q, phi_k, v, window):\n"
        "    N = phi_q.shape[2]\n"
        "    kv = torch.cat([torch.zeros_like(v[:, :, :1]), v], dim=2)\n"
        "    kk = torch.cat([torch.zeros_like(phi_k[:, :, :1]), phi_k], dim=2)\n"
        "    tot, nrm = (kk[..., :, None] * kv[..., None, :]).cumsum(2), kk.cumsum(2)\n"
        "    hi = torch.arange(1, N + 1)\n"
        "    lo = (hi - window - 1).clamp(min=0)\n"
        "    s, z = tot[:, :, hi] - tot[:, :, lo], nrm[:, :, hi] - nrm[:, :, lo]\n"
        "    return (phi_q[..., None, :] @ s)[..., 0, :] / (phi_q * z).sum(-1, keepdim=True)\n")),
    "4.1-plus-features-twice": ("4.1", HYP_VARIANCE + (
        "def hyperbolic_random_features(x, projection):\n"
        "    p = torch.exp(x @ projection.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(2 * projection.shape[0])\n"
        "    return torch.cat([p, p], -1)\n")),
    "4.1-scale-one-over-root-m": ("4.1", HYP_VARIANCE + (
        "def hyperbolic_random_features(x, projection):\n"
        "    p = x @ projection.T\n"
        "    c = torch.exp(-0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(projection.shape[0])\n"
        "    return torch.cat([torch.exp(p), torch.exp(-p)], -1) * c\n")),
    # the right features (the notebook's φ+ on [W; −W]) with a wrong or missing derivation
    "4.1-variance-is-the-second-moment": ("4.1", HYP_FEATURES + (
        "def hyperbolic_variance(x, y, nb_features):\n"
        "    s2 = ((x + y) ** 2).sum(-1)\n"
        "    return torch.exp(2 * (x * y).sum(-1) - s2) * (1 + torch.exp(2 * s2)) / (2 * nb_features)\n")),
    "4.1-variance-of-phi-plus": ("4.1", HYP_FEATURES + (
        "def hyperbolic_variance(x, y, nb_features):\n"
        "    s2 = ((x + y) ** 2).sum(-1)\n"
        "    return torch.exp(2 * (x * y).sum(-1)) * torch.expm1(s2) / nb_features\n")),
    "4.1-variance-a-constant": ("4.1", HYP_FEATURES + (
        "def hyperbolic_variance(x, y, nb_features):\n"
        "    return torch.full(x.shape[:-1], 0.1, dtype=torch.float64)\n")),
    "4.1-variance-without-one-over-m": ("4.1", HYP_FEATURES + (
        "def hyperbolic_variance(x, y, nb_features):\n"
        "    s2 = ((x + y) ** 2).sum(-1)\n"
        "    return torch.exp(2 * (x * y).sum(-1)) * torch.expm1(s2) * -torch.expm1(-s2) / 2\n")),
    "4.1-variance-inf-for-short-sums": ("4.1", HYP_FEATURES + (
        "def hyperbolic_variance(x, y, nb_features):\n"
        "    s2 = ((x + y) ** 2).sum(-1)\n"
        "    v = torch.exp(2 * (x * y).sum(-1)) * torch.expm1(s2) * -torch.expm1(-s2) / (2 * nb_features)\n"
        "    return v / (s2 > 0.3).double()\n")),
    "4.5-stabiliser-reads-the-global-max": ("4.5", FAVOR_EXPONENTS + RECURRENCE + (
        "def favor_causal(q, k, v, projection):\n"
        "    eq, ek = exponents(q, k, projection, q.shape[-1])\n"
        "    pq = torch.exp(eq - eq.amax(-1, keepdim=True))\n"
        "    pk = torch.exp(ek - ek.amax(dim=(-2, -1), keepdim=True))\n"
        "    B, H, N, m = pq.shape\n"
        "    return recurrence(pq, pk, v, pq.new_zeros(B, H, m, v.shape[-1]), pq.new_zeros(B, H, m), 0)\n")),
    "4.5-quadratic-tril-global-max": ("4.5", FAVOR_EXPONENTS + (
        "def favor_causal(q, k, v, projection):\n"
        "    eq, ek = exponents(q, k, projection, q.shape[-1])\n"
        "    pq = torch.exp(eq - eq.amax(-1, keepdim=True))\n"
        "    pk = torch.exp(ek - ek.amax(dim=(-2, -1), keepdim=True))\n"
        "    a = (pq @ pk.transpose(-2, -1)).tril()\n"
        "    return (a @ v) / a.sum(-1, keepdim=True)\n")),
    "4.5-quadratic-running-max": ("4.5", FAVOR_EXPONENTS + (  # right in every other respect: only its size fails
        "def favor_causal(q, k, v, projection):\n"
        "    eq, ek = exponents(q, k, projection, q.shape[-1])\n"
        "    pq = torch.exp(eq - eq.amax(-1, keepdim=True))\n"
        "    r = torch.cummax(ek.amax(-1), dim=-1).values\n"
        "    later = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).triu(1)\n"
        "    decay = torch.exp((r[..., None, :] - r[..., :, None]).masked_fill(later, float('-inf')))\n"
        "    a = (pq @ torch.exp(ek - r[..., None]).transpose(-2, -1)) * decay\n"
        "    return (a @ v) / a.sum(-1, keepdim=True)\n")),
    "4.5-unstabilised": ("4.5", FAVOR_EXPONENTS + RECURRENCE + (
        "def favor_causal(q, k, v, projection):\n"
        "    eq, ek = exponents(q, k, projection, q.shape[-1])\n"
        "    pq, pk = torch.exp(eq), torch.exp(ek)\n"
        "    B, H, N, m = pq.shape\n"
        "    return recurrence(pq, pk, v, pq.new_zeros(B, H, m, v.shape[-1]), pq.new_zeros(B, H, m), 0)\n")),
    # (a) the N x M matrix built by broadcasting and a sum, which no matrix-product spy sees
    "4.3-broadcast-attention-matrix": ("4.3", FAVOR_EXPONENTS + (
        "def favor_noncausal(q, k, v, projection):\n"
        "    eq, ek = exponents(q, k, projection, q.shape[-1])\n"
        "    pq = torch.exp(eq - eq.amax(-1, keepdim=True))\n"
        "    pk = torch.exp(ek - ek.amax(dim=(-2, -1), keepdim=True))\n"
        "    a = (pq[..., :, None, :] * pk[..., None, :, :]).sum(-1)\n"
        "    return (a[..., None] * v[..., None, :, :]).sum(-2) / a.sum(-1, keepdim=True)\n")),
    "4.4-broadcast-window-form": ("4.4", (
        "def sliding_window_linear_attention(phi_q, phi_k, v, window):\n"
        "    a = (phi_q[..., :, None, :] * phi_k[..., None, :, :]).sum(-1).tril().triu(1 - window)\n"
        "    return (a / a.sum(-1, keepdim=True)) @ v\n")),
    # (b) unstabilised causal FAVOR+ kept finite by float64: with prefix sums, and as a broadcast masked form
    "4.5-unstabilised-float64": ("4.5", FAVOR_EXPONENTS + RECURRENCE + (
        "def favor_causal(q, k, v, projection):\n"
        "    eq, ek = exponents(q.double(), k.double(), projection, q.shape[-1])\n"
        "    pq, pk = torch.exp(eq), torch.exp(ek)\n"
        "    B, H, N, m = pq.shape\n"
        "    return recurrence(pq, pk, v.double(), pq.new_zeros(B, H, m, v.shape[-1]), pq.new_zeros(B, H, m), 0)\n")),
    "4.5-unstabilised-float64-no-prefix-sums": ("4.5", FAVOR_EXPONENTS + (
        "def favor_causal(q, k, v, projection):\n"
        "    eq, ek = exponents(q.double(), k.double(), projection, q.shape[-1])\n"
        "    pq, pk = torch.exp(eq), torch.exp(ek)\n"
        "    a = (pq[..., :, None, :] * pk[..., None, :, :]).sum(-1).tril()\n"
        "    return (a[..., None] * v.double()[..., None, :, :]).sum(-2) / a.sum(-1, keepdim=True)\n")),
    # (c) unstabilised non-causal FAVOR+ that upcasts to float64 instead of subtracting the maxima
    "4.3-unstabilised-upcast": ("4.3", FAVOR_EXPONENTS + (
        "def favor_noncausal(q, k, v, projection):\n"
        "    eq, ek = exponents(q.double(), k.double(), projection, q.shape[-1])\n"
        "    pq, pk = torch.exp(eq), torch.exp(ek)\n"
        "    return (pq @ (pk.transpose(-2, -1) @ v.double())) / (pq @ pk.sum(-2)[..., None])\n")),
    "4.7-iid-rows-twice": ("4.7", (
        "import torch\n"
        "def orthogonal_mse(x, y, nb_features, draws, generator):\n"
        "    mse = []\n"
        "    for _ in range(2):\n"
        "        w = torch.randn(draws, nb_features, x.shape[-1], generator=generator, dtype=torch.float64)\n"
        "        est = torch.exp(-0.5 * (x @ x + y @ y)) * torch.cosh(w @ (x + y)).mean(-1)\n"
        "        mse.append((est - torch.exp(x @ y)).pow(2).mean())\n"
        "    return torch.stack(mse)\n")),
    "4.7-one-direction-not-m": ("4.7", (
        "import torch\n"
        "def orthogonal_mse(x, y, nb_features, draws, generator):\n"
        "    w = torch.randn(draws, x.shape[-1], generator=generator, dtype=torch.float64)\n"
        "    est = torch.exp(-0.5 * (x @ x + y @ y)) * torch.cosh(w @ (x + y))\n"
        "    m = (est - torch.exp(x @ y)).pow(2).mean()\n"
        "    return torch.stack([m, 0.5 * m])\n")),
    "4.7-positive-not-hyperbolic": ("4.7", ORTHO + (
        "def orthogonal_mse(x, y, nb_features, draws, generator):\n"
        "    m, d = nb_features, x.shape[-1]\n"
        "    iid = torch.randn(draws, m, d, generator=generator, dtype=torch.float64)\n"
        "    ortho = orthogonal_projection(draws * d, d, generator).view(draws, d, d)[:, :m]\n"
        "    mse = []\n"
        "    for w in (iid, ortho):\n"
        "        est = torch.exp(w @ (x + y) - 0.5 * (x @ x + y @ y)).mean(-1)\n"
        "        mse.append((est - torch.exp(x @ y)).pow(2).mean())\n"
        "    return torch.stack(mse)\n")),
    "4.7-formulas-not-measured": ("4.7", (
        "import torch\n"
        "def orthogonal_mse(x, y, nb_features, draws, generator):\n"
        "    sm, s2, d = torch.exp(x @ y), (x + y) @ (x + y), x.shape[-1]\n"
        "    iid = sm * sm * torch.expm1(s2) * -torch.expm1(-s2) / (2 * nb_features)\n"
        "    gap = 2 * (nb_features - 1) / (nb_features * (d + 2)) * (sm - torch.exp(-(x @ x + y @ y) / 2)) ** 2\n"
        "    return torch.stack([iid, iid - 1.5 * gap])\n")),
    "4.6-top-left-aligned": ("4.6", "import torch\n" + RECURRENCE + (
        "def causal_prefix_attention(phi_q, phi_k, v):\n"
        "    B, H, N, m = phi_q.shape\n"
        "    if N > phi_k.shape[2]:\n"
        "        raise ValueError('more queries than keys')\n"
        "    return recurrence(phi_q, phi_k, v, phi_q.new_zeros(B, H, m, v.shape[-1]), phi_q.new_zeros(B, H, m), 0)\n"
    )),
}


PASSING = {
    "4.1-phi-plus-on-both-signs": ("4.1", HYP_FEATURES + HYP_VARIANCE),
    # id: (task, source of another right answer, which the checks must accept)
    # section 6's form 1: a prefix state per position, O(N·m·Dv) memory; the prefix sums of φ(k_j)[v_j | 1]ᵀ taken
    # in log space (logcumsumexp), which needs no shift that reads ahead
    "4.5-prefix-sums-per-position": ("4.5", FAVOR_EXPONENTS + (
        "def favor_causal(q, k, v, projection):\n"
        "    eq, ek = exponents(q, k, projection, q.shape[-1])\n"
        "    v1 = torch.cat([v, torch.ones_like(v[..., :1])], -1)\n"
        "    lp, ln = (torch.logcumsumexp(ek[..., :, None] + (s * v1).clamp(min=0).log()[..., None, :], dim=2)\n"
        "              for s in (1, -1))  # (B, H, N, m, Dv + 1): log of the positive and negative prefix sums\n"
        "    c = (eq + lp[..., -1]).amax(-1, keepdim=True)[..., None]\n"
        "    terms = torch.exp(eq[..., None] + lp - c) - torch.exp(eq[..., None] + ln - c)\n"
        "    nd = terms.sum(-2)\n"
        "    return nd[..., :-1] / nd[..., -1:]\n")),
    "4.6-cumsum-of-outer-products": ("4.6", (
        "import torch\n"
        "def causal_prefix_attention(phi_q, phi_k, v):\n"
        "    N, M = phi_q.shape[2], phi_k.shape[2]\n"
        "    if N > M:\n"
        "        raise ValueError('more queries than keys')\n"
        "    v1 = torch.cat([v, torch.ones_like(v[..., :1])], -1)\n"
        "    s = (phi_k[..., :, None] * v1[..., None, :]).cumsum(2)[:, :, M - N:]  # (B, H, N, m, Dv + 1)\n"
        "    nd = (phi_q[..., None, :] @ s)[..., 0, :]\n"
        "    return nd[..., :-1] / nd[..., -1:]\n")),
}


@pytest.mark.parametrize("name", sorted(PASSING))
def test_another_right_answer_passes(name, tmp_path):
    task_id, code = PASSING[name]
    path = tmp_path / f"right_{name.replace('.', '_').replace('-', '_')}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run_in_process(TASKS[task_id], module)  # raises AssertionError, naming the check, if one fails


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_planted_wrong_answer_fails(name, tmp_path):
    task_id, code = MUTANTS[name]
    assert_fails(task_id, code, tmp_path, name)


def test_the_graders_flop_count_is_flop_counter_modes():
    """Task 3.6's expected values come from a light counter (FlopCounterMode imports torch._dynamo, seconds of
    start-up in every grading run); on every shape the task uses it must agree with FlopCounterMode itself."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from minilin import linformer
    from minilin.grading.ex03_linformer import FLOP_SHAPES, linformer_flops
    for B, H, N, M, D, Dv, k in FLOP_SHAPES:
        meta = lambda *s: torch.empty(*s, device="meta")
        with FlopCounterMode(display=False) as counter:
            linformer.linformer_attention(meta(B, H, N, D), meta(B, H, M, D), meta(B, H, M, Dv), meta(k, M),
                                          meta(k, M))
        assert linformer_flops(B, H, N, M, D, Dv, k) == counter.get_total_flops()
