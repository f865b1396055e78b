"""Plausible wrong answers to chapter 10's tasks: each must fail its task's checks (the MUTANTS pattern of
test_exercises.py). Each mutant is solutions/ex10_kernel.py with one line changed: a mistake that no decay, one
chunk or gentle gates would let through; and a token loop and a slab of all later keys with no carried state, right
in every value, where a chunked form is asked. A student copy of the course has no solutions/: there these tests are skipped (needs_solutions)."""
from pathlib import Path

import pytest
import torch
from mutants import assert_fails, edited

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.needs_solutions]

SOLUTION_FILE = Path(__file__).resolve().parents[2] / "solutions" / "ex10_kernel.py"
TOKEN_LOOP = '''    B, H, N, Dk = q.shape
    g = q.new_zeros(B, H, N) if log_decay is None else log_decay
    state, outs = q.new_zeros(B, H, Dk, v.shape[-1]), []
    for t in reversed(range(N)):  # one token at a time: right, but not the chunked form the task asks for
        state = state + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhd,bhdv->bhv", q[:, :, t], state))
        state = torch.exp(g[:, :, t])[..., None, None] * state
    return torch.stack(outs[::-1], dim=2)
'''
LATER_KEYS = '''    N = q.shape[2]
    g = q.new_zeros(q.shape[:3]) if log_decay is None else log_decay
    cum, out = g.cumsum(-1), []
    for s in range(0, N, chunk_size):  # each query chunk against all later keys, one (c x N) slab: no state
        e = min(s + chunk_size, N)
        rows, cols = torch.arange(s, e)[:, None], torch.arange(s, N)[None, :]
        w = torch.exp((cum[..., None, s:] - cum[..., s:e, None]).masked_fill(cols < rows, -math.inf))
        out.append(((q[:, :, s:e] @ k[:, :, s:].transpose(-1, -2)) * w) @ v[:, :, s:])
    return torch.cat(out, 2)
'''

MUTANTS = {
    # name: (the solution's line, its wrong replacement[, another line, its replacement])
    # 10.1: the causal triangle kept (the forward's habit): right only where each chunk is one token
    "10.1 causal mask": (
        "dtype=torch.bool, device=q.device).triu()", "dtype=torch.bool, device=q.device).tril()"),
    # 10.1: the carried state not decayed through the chunk: right without a decay
    "10.1 state not decayed": (
        "        carried = torch.exp(a[..., -1]).unsqueeze(-1).unsqueeze(-1) * carried + \\\n",
        "        carried = carried + \\\n"),
    # 10.1: the carried state read without the decay from each token to the chunk's end
    "10.1 read not decayed": (
        "        pieces.append(inside + to_end * torch.einsum(\"bhjd,bhdv->bhjv\", qc, carried))",
        "        pieces.append(inside + torch.einsum(\"bhjd,bhdv->bhjv\", qc, carried))"),
    # 10.1: the keys written with exp(a_i) measured from the chunk's end instead of its start
    "10.1 keys decayed to the end": (
        "            torch.einsum(\"bhi,bhid,bhiv->bhdv\", a.exp(), kc, vc)",
        "            torch.einsum(\"bhi,bhid,bhiv->bhdv\", (a[..., -1:] - a).exp(), kc, vc)"),
    # 10.1: cumulative decays over the whole sequence, not per chunk: exp of large differences (overflow)
    "10.1 factored exponentials": (
        "        pair = torch.where(at_or_after, a.unsqueeze(-2) - a.unsqueeze(-1), -math.inf).exp()  # [j, i]: a_i − a_j",
        "        pair = a.exp().unsqueeze(-2) * (-a).exp().unsqueeze(-1) * at_or_after"),
    # 10.1: a token loop (every value right)
    "10.1 token loop": (
        "    B, H, N, Dk = q.shape\n    g = q.new_zeros(B, H, N) if log_decay is None else log_decay\n"
        "    carried = q.new_zeros(B, H, Dk, v.shape[-1])",
        TOKEN_LOOP + "    carried = None"),
    # 10.1: no carried state: each query chunk against all later keys as one (c x N) slab (every value right,
    # no N x N tensor, O(N^2) work)
    "10.1 later keys as a slab": (
        "    B, H, N, Dk = q.shape\n    g = q.new_zeros(B, H, N) if log_decay is None else log_decay\n"
        "    carried = q.new_zeros(B, H, Dk, v.shape[-1])",
        LATER_KEYS + "    B, H, N, Dk = q.shape\n    carried = None"),
    # 10.2: the chunks rounded down (a ragged last chunk forgotten)
    "10.2 floor": ("    chunks = -(-n // chunk)", "    chunks = n // chunk"),
    # 10.2: only the dq scan counted (the forward's size)
    "10.2 one scan": ("    return chunks * (dq_scan + dkdv_scan), (3 + 1 + 4 + 2) * n * d * itemsize",
                      "    return chunks * dq_scan * 2, (3 + 1 + 4 + 2) * n * d * itemsize"),
    # 10.2: multiply-adds, not FLOPs
    "10.2 multiply-adds": ("    return chunks * (dq_scan + dkdv_scan), (3 + 1 + 4 + 2) * n * d * itemsize",
                           "    return chunks * (dq_scan + dkdv_scan) // 2, (3 + 1 + 4 + 2) * n * d * itemsize"),
    # 10.2: the forward's bytes (q, k, v read, o written)
    "10.2 forward bytes": ("    return chunks * (dq_scan + dkdv_scan), (3 + 1 + 4 + 2) * n * d * itemsize",
                           "    return chunks * (dq_scan + dkdv_scan), 4 * n * d * itemsize"),
}


def mutant(name):
    return edited(SOLUTION_FILE, MUTANTS[name], name)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_plausible_wrong_answer_fails(name, tmp_path):
    assert_fails(name.split()[0], mutant(name), tmp_path, name=name)


def test_the_mutants_are_right_somewhere():
    """A mutant that is wrong everywhere proves little: each is right on the case it was made to fool."""
    def load(name):
        ns = {}
        exec(mutant(name), ns)
        return ns

    solved = {}
    exec(SOLUTION_FILE.read_text(encoding="utf-8"), solved)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 9, 4, generator=g, dtype=torch.float64) for _ in range(3))
    gate = torch.nn.functional.logsigmoid(torch.randn(2, 2, 9, generator=g, dtype=torch.float64))
    right = solved["reverse_scan"](q, k, v, gate, 4)
    assert torch.allclose(load("10.1 token loop")["reverse_scan"](q, k, v, gate, 4), right, atol=1e-12)
    assert torch.allclose(load("10.1 later keys as a slab")["reverse_scan"](q, k, v, gate, 4), right, atol=1e-12)
    assert torch.allclose(load("10.1 causal mask")["reverse_scan"](q, k, v, gate, 1), right, atol=1e-12)
    assert torch.allclose(load("10.1 factored exponentials")["reverse_scan"](q, k, v, gate, 4), right, atol=1e-12)
    for name in ("10.1 state not decayed", "10.1 read not decayed", "10.1 keys decayed to the end"):
        assert torch.allclose(load(name)["reverse_scan"](q, k, v, None, 4), solved["reverse_scan"](q, k, v, None, 4),
                              atol=1e-12), name
    assert load("10.2 floor")["backward_cost"](4096, 64, 64, 2) == solved["backward_cost"](4096, 64, 64, 2)
    assert load("10.2 forward bytes")["backward_cost"](4096, 64, 64, 2)[0] == solved["backward_cost"](4096, 64, 64,
                                                                                                        2)[0]
