"""Plausible wrong answers to chapters 6 and 8's tasks: each must fail its task's checks (the MUTANTS pattern of
test_exercises.py). Each mutant is a mistake that one shape, one dtype or a notebook cell's special case would let
through."""
import importlib.util

import pytest
import torch

from minilin.grading.course import TASKS
from minilin.grading.runner import run_in_process

pytestmark = pytest.mark.usefixtures("one_thread")


_BACKWARD_HEAD = ("import math, torch\n"
                  "def blocked_attention_backward(q, k, v, out, lse, dout, block):\n"
                  "    c = 1 / math.sqrt(q.shape[-1])\n"
                  "    delta = (dout * out).sum(-1, keepdim=True)\n"
                  "    dq, dks, dvs = torch.zeros_like(q), [], []\n"
                  "    for s in range(0, k.shape[-2], block):\n"
                  "        kb, vb = k[..., s:s + block, :], v[..., s:s + block, :]\n")


def _backward(p="torch.exp(q @ kb.transpose(-2, -1) * c - lse[..., None])",
              ds="p * (dout @ vb.transpose(-2, -1) - delta)", dq="dq + ds @ kb * c", dk="ds.transpose(-2, -1) @ q * c"):
    """Task 6.4's blocked backward with one of its lines (p, ds, dq or dk) replaced by a wrong one."""
    return (_BACKWARD_HEAD +
            f"        p = {p}\n"
            "        dvs.append(p.transpose(-2, -1) @ dout)\n"
            f"        ds = {ds}\n"
            f"        dq = {dq}\n"
            f"        dks.append({dk})\n"
            "    return dq, torch.cat(dks, -2), torch.cat(dvs, -2)\n")

_EFFECTIVE_MAP = ("import torch\n"
                  "def linformer_effective_map(q, k, E, F, mask=None):\n"
                  "    B, M = k.shape[0], k.shape[2]\n"
                  "    E, F = E[..., :M], F[..., :M]\n"
                  "    real = torch.ones(B, M, dtype=k.dtype) if mask is None else mask.to(k.dtype)\n"
                  "    k = k * real[:, None, :, None]\n"
                  "    F = F * real[:, None, None, :]\n"
                  "    weighs = lambda P: (P.abs() * real[:, None, None, :]).sum(-1) > 0\n"
                  "    occupied = ({occupied})[:, :, None, :]\n"
                  "    s = q @ (E @ k).transpose(-2, -1) / q.shape[-1] ** 0.5\n"
                  "    return {weights} @ F\n")

# 8.1's plain form, A = softmax(q (E k)ᵀ / √scale) then A F, with padded keys zeroed and (f_mask) F's padded columns
_F_MASK = "        F = F * mask[:, None, None, :]\n"
_PLAIN_MAP = ("import torch\n"
              "def linformer_effective_map(q, k, E, F, mask=None):\n"
              "    M = k.shape[2]\n"
              "    E, F = E[..., :M], F[..., :M]\n"
              "    if mask is not None:\n"
              "        k = k.masked_fill(~mask[:, None, :, None], 0.0)\n"
              "{f_mask}"
              "    s = q @ (E @ k).transpose(-2, -1) / {scale} ** 0.5\n"
              "    return torch.softmax(s, -1) @ F\n")

MUTANTS = {
    # 6.1: notebook 06's count for N = M and D = Dv, written with N everywhere
    "6.1 N = M": ("exact_saved_bytes", "def exact_saved_bytes(B, H, N, M, D, Dv, itemsize):\n"
                                       "    return (B * H * N * N + 3 * B * H * N * D) * itemsize\n"),
    # 6.2: E and F counted twice even when they are one tensor
    "6.2 shared twice": ("linformer_saved_bytes",
                         "def linformer_saved_bytes(B, H, N, n, D, Dv, k, itemsize, shared):\n"
                         "    return (B * H * (N * k + N * D + k * D + k * Dv) + 2 * k * n) * itemsize\n"),
    # 6.2: exact attention's habit carried over: keys and values kept as well, projections forgotten
    "6.2 keeps k, v": ("linformer_saved_bytes",
                       "def linformer_saved_bytes(B, H, N, n, D, Dv, k, itemsize, shared):\n"
                       "    return B * H * (N * k + N * D + n * D + n * Dv) * itemsize\n"),
    # 6.3: the ceiling of the bound, equal counts taken as "fewer" when c / 4D is a whole number
    "6.3 ceil": ("flop_crossover", "import math\n"
                                   "def flop_crossover(method, dim_head, size=None):\n"
                                   "    D = dim_head\n"
                                   "    c = {'performer': lambda m: 4 * D * m + 4 * m * (D + 1),\n"
                                   "         'linear': lambda _: 4 * D * (D + 1), 'linformer': lambda k: 8 * k * D}\n"
                                   "    if method not in c:\n"
                                   "        raise ValueError(method)\n"
                                   "    return math.ceil(c[method](size) / (4 * D))\n"),
    # 6.3: FAVOR+ without its projection of q and k (only the two products with m features)
    "6.3 no projection": ("flop_crossover", "def flop_crossover(method, dim_head, size=None):\n"
                                            "    D = dim_head\n"
                                            "    c = {'performer': lambda m: 4 * m * (D + 1),\n"
                                            "         'linear': lambda _: 4 * D * (D + 1),\n"
                                            "         'linformer': lambda k: 8 * k * D}\n"
                                            "    if method not in c:\n"
                                            "        raise ValueError(method)\n"
                                            "    return c[method](size) // (4 * D) + 1\n"),
    # 6.3: the normaliser's column of ones (named in the statement) left out: v taken as D columns, not D + 1
    "6.3 no ones column": ("flop_crossover", "def flop_crossover(method, dim_head, size=None):\n"
                                             "    D = dim_head\n"
                                             "    c = {'performer': lambda m: 4 * D * m + 4 * m * D,\n"
                                             "         'linear': lambda _: 4 * D * D,\n"
                                             "         'linformer': lambda k: 8 * k * D}\n"
                                             "    if method not in c:\n"
                                             "        raise ValueError(method)\n"
                                             "    return c[method](size) // (4 * D) + 1\n"),
    # 6.4: each block's probabilities normalised within the block (its own softmax), not by the saved lse
    "6.4 tile softmax": ("blocked_attention_backward", _backward(
        p="torch.softmax(q @ kb.transpose(-2, -1) * c, -1)")),
    # 6.4: the saved lse divided out after exp: exp of raw scores overflows on large scores
    "6.4 no shift": ("blocked_attention_backward", _backward(
        p="torch.exp(q @ kb.transpose(-2, -1) * c) / torch.exp(lse)[..., None]")),
    # 6.4: the softmax's gradient without its row term delta (dS = P * dP)
    "6.4 no delta": ("blocked_attention_backward", _backward(ds="p * (dout @ vb.transpose(-2, -1))")),
    # 6.4: the 1/sqrt(D) of the scores forgotten in dq and dk
    "6.4 no scale": ("blocked_attention_backward", _backward(dq="dq + ds @ kb", dk="ds.transpose(-2, -1) @ q")),
    # 6.4: right numbers from the whole probability matrix at once (the memory the task removes)
    "6.4 all scores": ("blocked_attention_backward", "import math, torch\n"
               "def blocked_attention_backward(q, k, v, out, lse, dout, block):\n"
               "    c = 1 / math.sqrt(q.shape[-1])\n"
               "    p = torch.exp(q @ k.transpose(-2, -1) * c - lse[..., None])\n"
               "    ds = p * (dout @ v.transpose(-2, -1) - (dout * out).sum(-1, keepdim=True))\n"
               "    return ds @ k * c, ds.transpose(-2, -1) @ q * c, p.transpose(-2, -1) @ dout\n"),
    # 6.4: right numbers, one block at a time, but every block's probabilities kept alive until the end
    "6.4 keeps all blocks": ("blocked_attention_backward", _BACKWARD_HEAD +
               "        p = torch.exp(q @ kb.transpose(-2, -1) * c - lse[..., None])\n"
               "        dvs.append(p.transpose(-2, -1) @ dout)\n"
               "        dks.append(p)\n"
               "    dks = [(p * (dout @ v[..., i * block:(i + 1) * block, :].transpose(-2, -1) - delta)) for i, p in enumerate(dks)]\n"
               "    dq = sum(ds @ k[..., i * block:(i + 1) * block, :] * c for i, ds in enumerate(dks))\n"
               "    return dq, torch.cat([ds.transpose(-2, -1) @ q * c for ds in dks], -2), torch.cat(dvs, -2)\n"),
    # 6.5: "a causal kernel does half the work", whatever its blocks
    "6.5 half": ("causal_block_work", "def causal_block_work(n, q_block, kv_block):\n"
                 "    return 0.5\n"),
    # 6.5: square tiles of the key block assumed (the query block ignored)
    "6.5 square tiles": ("causal_block_work", "def causal_block_work(n, q_block, kv_block):\n"
                         "    t = -(-n // kv_block)\n"
                         "    return min(1.0, (t + 1) / (2 * t))\n"),
    # 6.5: the per-row count of keys a query sees (i + 1), no blocks at all
    "6.5 per row": ("causal_block_work", "def causal_block_work(n, q_block, kv_block):\n"
                    "    return (n + 1) / (2 * n)\n"),
    # 8.1: scores scaled by 1/√k (the number of slots) instead of 1/√D
    "8.1 scale by k": ("linformer_effective_map", _PLAIN_MAP.format(f_mask=_F_MASK, scale="E.shape[-2]")),
    # 8.1: padded keys zeroed, but the padded positions' columns of F kept (their values would join the slots)
    "8.1 padded values": ("linformer_effective_map", _PLAIN_MAP.format(f_mask="", scale="q.shape[-1]")),
    # 8.1: padding handled, but a slot that holds no real position (its E and F rows zero there) kept in the softmax
    "8.1 empty slots kept": ("linformer_effective_map", _PLAIN_MAP.format(f_mask=_F_MASK, scale="q.shape[-1]")),
    # 8.1: empty slots set to -inf before the softmax, but a sequence with no slot left gets NaN, not zeros
    "8.1 NaN on all padding": ("linformer_effective_map", _EFFECTIVE_MAP.format(
        occupied="weighs(E) | weighs(F)", weights="torch.softmax(s.masked_fill(~occupied, float('-inf')), -1)")),
    # 8.1: a slot counted as empty when its E row weighs no real position, though its F row does
    "8.1 slots by E": ("linformer_effective_map", _EFFECTIVE_MAP.format(
        occupied="weighs(E)", weights="torch.nan_to_num(torch.softmax(s.masked_fill(~occupied, float('-inf')), -1))")),
    # 8.2: linear attention's normaliser kept: the readout divided by q · Σ_i k_i
    "8.2 normalised": ("state_readout", "import torch\n"
                 "def state_readout(k, v, q):\n"
                 "    return (q @ (k.transpose(-2, -1) @ v)) / (q @ k.sum(-2, keepdim=True).transpose(-2, -1))\n"
                 "def recall_accuracy(k, v):\n"
                 "    r = state_readout(k, v, k)\n"
                 "    own = torch.arange(k.shape[-2])\n"
                 "    return (torch.cdist(r, v).argmin(-1) == own).double().mean(-1)\n"),
    # 8.2: exact softmax attention over the pairs instead of the fixed-size state (no crosstalk)
    "8.2 exact attention": ("state_readout", "import torch\n"
                 "def state_readout(k, v, q):\n"
                 "    return torch.softmax(q @ k.transpose(-2, -1) * 50.0, -1) @ v\n"
                 "def recall_accuracy(k, v):\n"
                 "    r = state_readout(k, v, k)\n"
                 "    own = torch.arange(k.shape[-2])\n"
                 "    return (torch.cdist(r, v).argmin(-1) == own).double().mean(-1)\n"),
    # 8.2: recall judged by the largest dot product with the stored values, not the nearest value
    "8.2 dot product": ("recall_accuracy", "import torch\n"
                 "def state_readout(k, v, q):\n"
                 "    return q @ (k.transpose(-2, -1) @ v)\n"
                 "def recall_accuracy(k, v):\n"
                 "    r = state_readout(k, v, k)\n"
                 "    own = torch.arange(k.shape[-2])\n"
                 "    return ((r @ v.transpose(-2, -1)).argmax(-1) == own).double().mean(-1)\n"),
    # 8.3: the own slot's weight at least 1 - tol, whatever the values (the error is a weight times a spread)
    "8.3 own weight": ("copy_sharpness", "import math\n"
                 "def copy_sharpness(v, positions, tol):\n"
                 "    n = len(positions)\n"
                 "    return max(0.0, math.log((n - 1) * (1 - tol) / tol))\n"),
    # 8.3: each other slot's weight taken as e^-s, as if the own slot's weight were 1
    "8.3 no crowd": ("copy_sharpness", "import math\n"
                 "def copy_sharpness(v, positions, tol):\n"
                 "    c = v[..., list(positions), :]\n"
                 "    n = c.shape[-2]\n"
                 "    spread = float((c.sum(-2, keepdim=True) - n * c).abs().max())\n"
                 "    return max(0.0, math.log(spread / tol))\n"),
    # 8.3: the mean error over the entries, not the largest, within tol
    "8.3 mean error": ("copy_sharpness", "import math\n"
                 "def copy_sharpness(v, positions, tol):\n"
                 "    c = v[..., list(positions), :]\n"
                 "    n = c.shape[-2]\n"
                 "    spread = float((c.sum(-2, keepdim=True) - n * c).abs().mean())\n"
                 "    return math.log(spread / tol - n + 1) if spread / tol > n else 0.0\n"),
    # 8.3: the formula without its floor at 0: a negative s (or a log of a negative) where s = 0 already copies
    "8.3 no floor": ("copy_sharpness", "import math\n"
                 "def copy_sharpness(v, positions, tol):\n"
                 "    c = v[..., list(positions), :]\n"
                 "    n = c.shape[-2]\n"
                 "    spread = float((c.sum(-2, keepdim=True) - n * c).abs().max())\n"
                 "    return math.log(abs(spread / tol - n + 1))\n"),
    # 8.4: the largest p that passes, even after a smaller prefix failed (the prefixes not all checked)
    "8.4 any prefix": ("pairs_held", "import torch\n"
                 "def pairs_held(k, v, threshold=0.9):\n"
                 "    best = 0\n"
                 "    for p in range(1, k.shape[0] + 1):\n"
                 "        n = torch.cdist(k[:p] @ (k[:p].T @ v[:p]), v[:p]).argmin(-1)\n"
                 "        if (n == torch.arange(p)).double().mean() >= threshold:\n"
                 "            best = p\n"
                 "    return best\n"),
    # 8.4: the "about D" answer, whatever the draw
    "8.4 answer D": ("pairs_held", "def pairs_held(k, v, threshold=0.9):\n"
                                   "    return k.shape[1]\n"),
    # 8.4: the nearest value sought among all P values, not among the p stored ones
    "8.4 all values": ("pairs_held", "import torch\n"
                 "def pairs_held(k, v, threshold=0.9):\n"
                 "    held = 0\n"
                 "    for p in range(1, k.shape[0] + 1):\n"
                 "        n = torch.cdist(k[:p] @ (k[:p].T @ v[:p]), v).argmin(-1)\n"
                 "        if (n == torch.arange(p)).double().mean() < threshold:\n"
                 "            break\n"
                 "        held = p\n"
                 "    return held\n"),
    # 8.4: recall judged by the largest dot product with the stored values, not the nearest value
    "8.4 dot product": ("pairs_held", "import torch\n"
                 "def pairs_held(k, v, threshold=0.9):\n"
                 "    held = 0\n"
                 "    for p in range(1, k.shape[0] + 1):\n"
                 "        n = (k[:p] @ (k[:p].T @ v[:p]) @ v[:p].T).argmax(-1)\n"
                 "        if (n == torch.arange(p)).double().mean() < threshold:\n"
                 "            break\n"
                 "        held = p\n"
                 "    return held\n"),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_plausible_wrong_answer_fails(name, tmp_path):
    function, code = MUTANTS[name]
    task_id = name.split()[0]
    path = tmp_path / f"mutant_{task_id.replace('.', '_')}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, function)
    with pytest.raises(AssertionError):
        run_in_process(TASKS[task_id], module)



def test_the_fast_pairs_held_reference_is_the_loop():
    from minilin.grading.ex08_limits import held_by_prefix, held_loop
    for s in range(4):
        g = torch.Generator().manual_seed(s)
        keys = torch.nn.functional.normalize(torch.randn(40, 8, generator=g, dtype=torch.float64), dim=-1)
        values = torch.randn(40, 8, generator=g, dtype=torch.float64)
        for threshold in (0.5, 0.9):
            assert held_by_prefix(keys, values, threshold) == held_loop(keys, values, threshold)


def test_the_mutants_are_right_somewhere():
    """A mutant that is wrong everywhere proves little: each 8.1 mutant is right on the cases it was made to fool."""
    from minilin.grading.ex08_limits import layer_map
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 2, n, 3, generator=g, dtype=torch.float64) for n in (5, 6))
    E, F = (torch.randn(2, 3, 8, generator=g, dtype=torch.float64) for _ in range(2))
    dense = torch.tensor([[True] * 6, [True, False, True, True, False, True]])
    for name in ("8.1 empty slots kept", "8.1 NaN on all padding", "8.1 slots by E"):  # dense E, F: no empty slot
        ns = {}
        exec(MUTANTS[name][1], ns)
        assert torch.allclose(ns["linformer_effective_map"](q, k, E, F, mask=dense), layer_map(q, k, E, F, dense),
                              atol=1e-12), name
    selection = torch.eye(3, 8, dtype=torch.float64)  # E = F: slot j is position j; padding empties slots 0 and 2
    some = torch.tensor([[True] * 6, [False, True, False, True, True, True]])
    for name in ("8.1 NaN on all padding", "8.1 slots by E"):  # empty slots right while some slot holds a token
        ns = {}
        exec(MUTANTS[name][1], ns)
        assert torch.allclose(ns["linformer_effective_map"](q, k, selection, selection, mask=some),
                              layer_map(q, k, selection, selection, some), atol=1e-12), name
