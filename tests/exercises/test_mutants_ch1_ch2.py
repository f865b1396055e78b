"""Planted wrong answers for the extend tasks of chapters 1 and 2 (1.6, 1.7, 2.6, 2.7): each must fail its checks.

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
    # 1.5: the table of the usual four dtypes the hint warns against
    "1.5 table": ("1.5", "import torch\n"
                  "SIZE = {torch.float16: 2, torch.bfloat16: 2, torch.float32: 4, torch.float64: 8}\n"
                  "def score_matrix_bytes(batch, heads, n, dtype):\n"
                  "    return batch * heads * n * n * SIZE.get(dtype, 4)\n"),
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
    # the spectral error of rank r taken as s_r instead of s_{r+1}
    "spectral error off by one": ("2.6", "import torch\n"
        "def truncation_errors(P):\n"
        "    s = torch.linalg.svdvals(P)\n"
        "    tail = (s ** 2).flip(-1).cumsum(-1).flip(-1)\n"
        "    z = torch.zeros_like(s[..., :1])\n"
        "    return torch.cat([tail[..., 1:], z], -1).sqrt(), s\n"),
    # the notebook's yardstick: the relative, squared Frobenius error
    "relative squared errors": ("2.6", "import torch\n"
        "def truncation_errors(P):\n"
        "    s = torch.linalg.svdvals(P)\n"
        "    e = (s ** 2).cumsum(-1) / (s ** 2).sum(-1, keepdim=True)\n"
        "    z = torch.zeros_like(s[..., :1])\n"
        "    return 1 - e, torch.cat([s[..., 1:], z], -1)\n"),
    # notebook 02's circulant window: the band wraps around the ends
    "band wraps around": ("2.7", "import math\nimport torch\n"
        "def band_rank(q, k, width, threshold=0.9):\n"
        "    if width < 1:\n        raise ValueError('width')\n"
        "    n = q.shape[-2]\n"
        "    lag = (torch.arange(n)[:, None] - torch.arange(n)[None, :]) % n\n"
        "    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(lag >= width, float('-inf'))\n"
        "    e = torch.linalg.svdvals(torch.softmax(s, -1)) ** 2\n"
        "    e = e.cumsum(-1) / e.sum(-1, keepdim=True)\n"
        "    return (e < threshold - 1e-12).sum(-1) + 1\n"),
    # a two-sided band |i - j| < width: it reads the future
    "band is not causal": ("2.7", "import math\nimport torch\n"
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
