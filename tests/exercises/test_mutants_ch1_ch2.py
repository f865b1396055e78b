"""Planted wrong answers for the tasks of chapter 1 and of chapter 2 (2.1-2.6): each must fail.

Each mutant is a plausible mistake that a weaker check (one length, N == M, one window, a square matrix) would let
through. Same pattern as MUTANTS in test_exercises.py: the code is written to a file, imported, and graded in process.
"""

import pytest

from mutants import assert_fails


ATTEND = ("import math\nimport torch\n"
          "def _attend(q, k, v, visible):\n"
          "    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~visible, float('-inf'))\n"
          "    return torch.softmax(s, -1).nan_to_num(0.0) @ v\n"
          "def _causal(n, m):\n"
          "    return torch.ones(n, m, dtype=torch.bool).tril(m - n)\n")

MUTANTS = {
    # 1.1: the key heads tiled (0, 1, 0, 1) instead of repeated in place (0, 0, 1, 1): right only when G == H or G == 1
    "1.1 tiled key heads": ("1.1", "import math\nimport torch\n"
        "def scaled_scores(q, k):\n"
        "    keys = k.repeat(1, q.shape[1] // k.shape[1], 1, 1)\n"
        "    return q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"),
    # 1.2: the notebook's softmax, rows summing to 1: the extra zero logit forgotten
    "1.2 ordinary softmax": ("1.2", "import torch\n"
        "def stable_softmax(scores, dim=-1):\n"
        "    return torch.softmax(scores, dim=dim).nan_to_num(0.0)\n"),
    # 1.3: the prefix read causally too (plain causal mask)
    "1.3 prefix ignored": ("1.3", "import torch\n"
        "def causal_mask(n, m, prefix=0):\n"
        "    return torch.ones(n, m, dtype=torch.bool).tril(m - n)\n"),
    # 1.3: the prefix counted from the first query instead of the first key
    "1.3 prefix top-left": ("1.3", "import torch\n"
        "def causal_mask(n, m, prefix=0):\n"
        "    j = torch.arange(m)[None, :]\n"
        "    return (j <= torch.arange(n)[:, None] + m - n) | (j < prefix - (m - n))\n"),
    # 1.4: the ordinary softmax inside grouped attention
    "1.4 ordinary softmax": ("1.4", "import math\nimport torch\n"
        "def attention(q, k, v, mask=None, causal=False):\n"
        "    g = q.shape[1] // k.shape[1]\n"
        "    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)\n"
        "    n, m = q.shape[2], k.shape[2]\n"
        "    vis = torch.ones(n, m, dtype=torch.bool).tril(m - n) if causal else torch.ones(n, m, dtype=torch.bool)\n"
        "    if mask is not None:\n        vis = vis & mask[:, None, None, :]\n"
        "    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~vis, float('-inf'))\n"
        "    return torch.softmax(s, -1).nan_to_num(0.0) @ v\n"),
    # 1.5: the 1/√D scale always, whatever `scale` says
    "1.5 scale ignored": ("1.5", "import math\nimport torch\n"
        "def saturated_rows(q, k, scale=None, threshold=0.99):\n"
        "    p = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\n"
        "    return (p.amax(-1) >= threshold).double().mean(-1)\n"),
    # 1.5: the share over every weight instead of each row's largest one
    "1.5 every weight": ("1.5", "import math\nimport torch\n"
        "def saturated_rows(q, k, scale=None, threshold=0.99):\n"
        "    c = 1 / math.sqrt(q.shape[-1]) if scale is None else scale\n"
        "    p = torch.softmax(c * q @ k.transpose(-2, -1), -1)\n"
        "    return (p >= threshold).double().mean((-2, -1))\n"),
    # 1.5: one number for the whole batch
    "1.5 one share": ("1.5", "import math\nimport torch\n"
        "def saturated_rows(q, k, scale=None, threshold=0.99):\n"
        "    c = 1 / math.sqrt(q.shape[-1]) if scale is None else scale\n"
        "    p = torch.softmax(c * q @ k.transpose(-2, -1), -1)\n"
        "    return (p.amax(-1) >= threshold).double().mean()\n"),
    # 1.7: all NaN (a check written as `if diff > tol` once let it through its perturbation check)
    "window all NaN": ("1.7", "import torch\n"
        "def local_attention(q, k, v, window, mask=None):\n"
        "    if window < 1:\n        raise ValueError('window')\n"
        "    return torch.full(q.shape[:-1] + v.shape[-1:], float('nan'), dtype=q.dtype)\n"),
    # a chunk's queries see every new key, later ones included: right only for one new token at a time
    "decode reads a future key": ("1.6", ATTEND +
        "def decode_step(kc, vc, q, k, v):\n"
        "    K, V = torch.cat([kc, k], 2), torch.cat([vc, v], 2)\n"
        "    return _attend(q, K, V, torch.ones(q.shape[2], K.shape[2], dtype=torch.bool)), K, V\n"),
    # the new token attends to the cache only, not to itself (and an empty cache gives zeros)
    "decode skips the current token": ("1.6", ATTEND +
        "def decode_step(kc, vc, q, k, v):\n"
        "    K, V = torch.cat([kc, k], 2), torch.cat([vc, v], 2)\n"
        "    return _attend(q, K, V, _causal(q.shape[2], K.shape[2]).tril(K.shape[2] - q.shape[2] - 1)), K, V\n"),
    # right outputs, but the cache handed back is the old one
    "decode does not grow the cache": ("1.6", ATTEND +
        "def decode_step(kc, vc, q, k, v):\n"
        "    K, V = torch.cat([kc, k], 2), torch.cat([vc, v], 2)\n"
        "    return _attend(q, K, V, _causal(q.shape[2], K.shape[2])), kc, vc\n"),
    # the window holds window + 1 keys
    "window off by one": ("1.7", ATTEND +
        "def local_attention(q, k, v, window, mask=None):\n"
        "    if window < 1:\n        raise ValueError('window')\n"
        "    n, m = q.shape[2], k.shape[2]\n"
        "    lag = torch.arange(n)[:, None] + m - n - torch.arange(m)[None, :]\n"
        "    visible = ((lag >= 0) & (lag <= window))[None, None]\n"
        "    if mask is not None:\n        visible = visible & mask[:, None, None, :]\n"
        "    return _attend(q, k, v, visible)\n"),
    # the window aligned top-left (query i at position i): right only when N == M
    "window aligned top-left": ("1.7", ATTEND +
        "def local_attention(q, k, v, window, mask=None):\n"
        "    if window < 1:\n        raise ValueError('window')\n"
        "    n, m = q.shape[2], k.shape[2]\n"
        "    lag = torch.arange(n)[:, None] - torch.arange(m)[None, :]\n"
        "    visible = ((lag >= 0) & (lag < window))[None, None]\n"
        "    if mask is not None:\n        visible = visible & mask[:, None, None, :]\n"
        "    return _attend(q, k, v, visible)\n"),
    # 2.1: the error budget taken as an energy budget (max_error instead of max_error²)
    "error budget not squared": ("2.1", "import torch\n"
        "def rank_for_error(P, max_error):\n"
        "    if not 0 <= max_error < 1:\n        raise ValueError('max_error')\n"
        "    e = torch.linalg.svdvals(P.double()) ** 2\n"
        "    e = e.cumsum(-1) / e.sum(-1, keepdim=True)\n"
        "    return (e < 1 - max_error - 1e-12).sum(-1) + 1\n"),
    # 2.2: the counts themselves, the energies, as singular values
    "one-hot counts, not their roots": ("2.2", "import torch\n"
        "def one_hot_spectrum(picks, n_keys):\n"
        "    c = torch.nn.functional.one_hot(picks, n_keys).sum(-2).double().sort(-1, descending=True).values\n"
        "    return c[..., :min(picks.shape[-1], n_keys)]\n"),
    # 2.3: the values' mean ignored (ρ = n, right only for zero-mean values or a permutation)
    "JL length, mean ignored": ("2.3", "import torch\n"
        "def jl_projected_length(P, value_mean, max_error):\n"
        "    n = torch.full(value_mean.shape[:-1], float(P.shape[-1]))\n"
        "    return torch.ceil((n + 1) / max_error ** 2).long()\n"),
    # 2.3: the +1 of the formula dropped, and the error not squared
    "JL length without the +1": ("2.3", "import torch\n"
        "def _rho(P, m):\n"
        "    n, dv = P.shape[-1], m.shape[-1]\n"
        "    p2, m2 = P.square().sum((-2, -1)), m.square().sum(-1)\n"
        "    return p2 * n * (m2 + dv) / (P.sum(-1).square().sum(-1) * m2 + dv * p2)\n"

        "def jl_projected_length(P, value_mean, max_error):\n"
        "    return torch.ceil(_rho(P, value_mean) / max_error ** 2).long()\n"),
    "JL length with the error not squared": ("2.3", "import torch\n"
        "def _rho(P, m):\n"
        "    n, dv = P.shape[-1], m.shape[-1]\n"
        "    p2, m2 = P.square().sum((-2, -1)), m.square().sum(-1)\n"
        "    return p2 * n * (m2 + dv) / (P.sum(-1).square().sum(-1) * m2 + dv * p2)\n"

        "def jl_projected_length(P, value_mean, max_error):\n"
        "    return torch.ceil((_rho(P, value_mean) + 1) / max_error).long()\n"),
    # 2.3: ρ measured on the mean alone (the noise forgotten in the context)
    "JL length, noise forgotten": ("2.3", "import torch\n"
        "def jl_projected_length(P, value_mean, max_error):\n"
        "    n, dv = P.shape[-1], value_mean.shape[-1]\n"
        "    p2, m2 = P.square().sum((-2, -1)), value_mean.square().sum(-1)\n"
        "    rho = p2 * n * (m2 + dv) / (P.sum(-1).square().sum(-1) * m2).clamp_min(1e-12)\n"
        "    return torch.ceil((rho + 1) / max_error ** 2).clamp_max(10 ** 6).long()\n"),
    # 2.4: the main lobe's width, 2 n / w, as the rank; one constant (width 3's, or the wide-window limit); the
    # notebook's table of c, read at the nearest width
    "window rank as the main lobe": ("2.4", "def predicted_window_rank(n, width):\n"
        "    return round(2 * n / width)\n"),
    "window rank of width 3's constant": ("2.4", "def predicted_window_rank(n, width):\n"
        "    return round(1.35 * n / width)\n"),
    "window rank, one constant": ("2.4", "def predicted_window_rank(n, width):\n"
        "    return round(1.65 * n / width)\n"),
    "window rank, the wide-window limit": ("2.4", "def predicted_window_rank(n, width):\n"
        "    return round(1.683 * n / width)\n"),
    "window rank from the notebook's table": ("2.4", "def predicted_window_rank(n, width):\n"
        "    table = {3: 1.35, 9: 1.62, 17: 1.66, 33: 1.68, 65: 1.78}\n"
        "    c = table[min(table, key=lambda w: abs(w - width))]\n"
        "    return round(c * n / width)\n"),
    # the spectral error of rank r taken as s_r instead of s_{r+1}
    "spectral error off by one": ("2.5", "import torch\n"
        "def truncation_errors(P):\n"
        "    s = torch.linalg.svdvals(P)\n"
        "    tail = (s ** 2).flip(-1).cumsum(-1).flip(-1)\n"
        "    z = torch.zeros_like(s[..., :1])\n"
        "    return torch.cat([tail[..., 1:], z], -1).sqrt(), s\n"),
    # the notebook's yardstick: the relative, squared Frobenius error
    "relative squared errors": ("2.5", "import torch\n"
        "def truncation_errors(P):\n"
        "    s = torch.linalg.svdvals(P)\n"
        "    e = (s ** 2).cumsum(-1) / (s ** 2).sum(-1, keepdim=True)\n"
        "    z = torch.zeros_like(s[..., :1])\n"
        "    return 1 - e, torch.cat([s[..., 1:], z], -1)\n"),
    # notebook 02's circulant window: the band wraps around the ends
    "band wraps around": ("2.6", "import math\nimport torch\n"
        "def band_rank(q, k, width, threshold=0.9):\n"
        "    if width < 1:\n        raise ValueError('width')\n"
        "    n = q.shape[-2]\n"
        "    lag = (torch.arange(n)[:, None] - torch.arange(n)[None, :]) % n\n"
        "    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(lag >= width, float('-inf'))\n"
        "    e = torch.linalg.svdvals(torch.softmax(s, -1)) ** 2\n"
        "    e = e.cumsum(-1) / e.sum(-1, keepdim=True)\n"
        "    return (e < threshold - 1e-12).sum(-1) + 1\n"),
    # a two-sided band |i - j| < width: it reads the future
    "band is not causal": ("2.6", "import math\nimport torch\n"
        "def band_rank(q, k, width, threshold=0.9):\n"
        "    if width < 1:\n        raise ValueError('width')\n"
        "    n = q.shape[-2]\n"
        "    lag = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs()\n"
        "    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(lag >= width, float('-inf'))\n"
        "    e = torch.linalg.svdvals(torch.softmax(s, -1)) ** 2\n"
        "    e = e.cumsum(-1) / e.sum(-1, keepdim=True)\n"
        "    return (e < threshold - 1e-12).sum(-1) + 1\n"),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny tensors, one thread


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_plausible_wrong_answer_fails(name, tmp_path):
    task_id, code = MUTANTS[name]
    assert_fails(task_id, code, tmp_path, name)
