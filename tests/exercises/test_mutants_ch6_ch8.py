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

# 8.1: Linformer's form (A >= 0, rows summing to 1) for a permuted copy; {weights} is slot j's (S, k) weights before
# the rows are normalised, {F} the (k, S) rows; Q (S, k - 1) and R (S, k) have orthonormal columns
_CONVEX = ("import torch\n"
           "def convex_copy_map(sources, k):\n"
           "    S = sources.shape[0]\n"
           "    g = torch.Generator().manual_seed(0)\n"
           "    Q = torch.linalg.qr(torch.randn(S, k - 1, generator=g, dtype=torch.float64))[0]\n"
           "    R = torch.linalg.qr(torch.randn(S, k, generator=g, dtype=torch.float64))[0]\n"
           "    c = float(Q.abs().max())\n"
           "    A = {weights}\n"
           "    return {normalise}, {F}\n")
_SHIFTED = "torch.cat([Q[sources] + c, torch.full((S, 1), c, dtype=Q.dtype)], 1)"
_CANCEL = "torch.cat([Q.T, -Q.T.sum(0, keepdim=True)])"


def _convex(weights=_SHIFTED, F=_CANCEL, normalise="A / A.sum(1, keepdim=True)"):
    return ("convex_copy_map", _CONVEX.format(weights=weights, F=F, normalise=normalise))


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
    # 8.1: section 5's random map as it is: it decodes well, but its weights take both signs
    "8.1 signed weights": _convex(weights="R[sources]", F="R.T", normalise="A"),
    # 8.1: the random map's weights shifted to >= 0, but no slot spent on taking the shift back
    "8.1 shift kept": _convex(weights="R[sources] + float(R.abs().max())", F="R.T"),
    # 8.1: the notebook's own convex map, block averaging, permuted to the sources: no better than itself
    "8.1 block averaging": ("convex_copy_map", "import torch\n"
                            "def convex_copy_map(sources, k):\n"
                            "    S = sources.shape[0]\n"
                            "    A, F = torch.zeros(S, k, dtype=torch.float64), torch.zeros(k, S, dtype=torch.float64)\n"
                            "    for i, group in enumerate(torch.tensor_split(torch.arange(S), k)):\n"
                            "        A[group, i] = 1.0\n"
                            "        F[i, sources[group]] = 1.0 / len(group)\n"
                            "    return A, F\n"),
    # 8.1: the right construction for the identity copy: slot j reads position j whatever the sources
    "8.1 sources ignored": _convex(weights="torch.cat([Q + c, torch.full((S, 1), c, dtype=Q.dtype)], 1)"),
    # 8.1: the right map, but A's rows left unnormalised (not a softmax's output)
    "8.1 rows not normalised": _convex(normalise="A"),
    # 8.1: a constant answer for S = 63, k = 16 (the docstring's example), whatever is asked
    "8.1 constant": ("convex_copy_map", "import torch\n"
                     "def convex_copy_map(sources, k):\n"
                     "    return torch.full((63, 16), 1 / 16, dtype=torch.float64), torch.zeros(16, 63, dtype=torch.float64)\n"),
    # 8.1: the right map with NaN weights in its last row
    "8.1 NaN": _convex(normalise="torch.cat([A[:-1], A[-1:] * float('nan')]) / A.sum(1, keepdim=True)"),
    # 8.2: the own slot's weight at least 1 - tol, whatever the values (the error is a weight times a spread)
    "8.2 own weight": ("copy_sharpness", "import math\n"
                 "def copy_sharpness(v, positions, tol):\n"
                 "    n = len(positions)\n"
                 "    return max(0.0, math.log((n - 1) * (1 - tol) / tol))\n"),
    # 8.2: each other slot's weight taken as e^-s, as if the own slot's weight were 1
    "8.2 no crowd": ("copy_sharpness", "import math\n"
                 "def copy_sharpness(v, positions, tol):\n"
                 "    c = v[..., list(positions), :]\n"
                 "    n = c.shape[-2]\n"
                 "    spread = float((c.sum(-2, keepdim=True) - n * c).abs().max())\n"
                 "    return max(0.0, math.log(spread / tol))\n"),
    # 8.2: the mean error over the entries, not the largest, within tol
    "8.2 mean error": ("copy_sharpness", "import math\n"
                 "def copy_sharpness(v, positions, tol):\n"
                 "    c = v[..., list(positions), :]\n"
                 "    n = c.shape[-2]\n"
                 "    spread = float((c.sum(-2, keepdim=True) - n * c).abs().mean())\n"
                 "    return math.log(spread / tol - n + 1) if spread / tol > n else 0.0\n"),
    # 8.2: the formula without its floor at 0: a negative s (or a log of a negative) where s = 0 already copies
    "8.2 no floor": ("copy_sharpness", "import math\n"
                 "def copy_sharpness(v, positions, tol):\n"
                 "    c = v[..., list(positions), :]\n"
                 "    n = c.shape[-2]\n"
                 "    spread = float((c.sum(-2, keepdim=True) - n * c).abs().max())\n"
                 "    return math.log(abs(spread / tol - n + 1))\n"),
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



@pytest.mark.needs_solutions
def test_the_8_1_mutants_are_right_somewhere():
    """A mutant that is wrong everywhere proves little: the signed map decodes as well as the solution (only its form
    is wrong), and the map that ignores the sources is right on the identity copy."""
    from minilin.grading.ex08_limits import ALPHABET, MARGIN, block_averaging, decoded
    from solutions.ex08_limits import convex_copy_map
    S, k = 63, 16
    sources = torch.randperm(S, generator=torch.Generator().manual_seed(0))
    letters = torch.randint(ALPHABET, (1000, S), generator=torch.Generator().manual_seed(1))
    kept = lambda name, src: decoded(torch.matmul(*_load(name).convex_copy_map(src, k)), src, letters)
    base = decoded(torch.matmul(*block_averaging(sources, k)), sources, letters)
    assert kept("8.1 signed weights", sources) >= base + MARGIN
    assert kept("8.1 sources ignored", torch.arange(S)) >= base + MARGIN
    assert decoded(torch.matmul(*convex_copy_map(sources, k)), sources, letters) >= base + MARGIN
    assert kept("8.1 shift kept", sources) < base + MARGIN


def _load(name):
    ns = {}
    exec(MUTANTS[name][1], ns)
    return type("Mutant", (), ns)
