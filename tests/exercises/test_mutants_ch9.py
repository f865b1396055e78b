"""Plausible wrong answers to chapter 9's tasks: each must fail its task's checks (the MUTANTS pattern of
test_exercises.py). Each mutant is solutions/ex09_gates.py with one line changed: a mistake that one shape, the
notebook's scalar-decay case or gentle gates would let through. A student copy of the course has no solutions/:
there these tests are skipped (needs_solutions)."""
from pathlib import Path

import pytest
import torch
from mutants import assert_fails, edited

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.needs_solutions]

SOLUTION_FILE = Path(__file__).resolve().parents[2] / "solutions" / "ex09_gates.py"

MUTANTS = {
    # name: (the solution's line, its wrong replacement[, another line, its replacement])
    # 9.1: the gate left out of L (right when α = 1: the notebook's ungated chunk form)
    "9.1 no decay in L": (
        "        lower = torch.tril(bc[..., None] * (kc @ kc.transpose(-2, -1)) * decay, diagonal=-1)",
        "        lower = torch.tril(bc[..., None] * (kc @ kc.transpose(-2, -1)), diagonal=-1)"),
    # 9.1: the carried state read by the query without the decay from the chunk's start
    "9.1 undecayed read of S_in": (
        "        outs.append(torch.exp(b)[..., None] * (qc @ state) + ((qc @ kc.transpose(-2, -1)) * decay) @ delta)",
        "        outs.append(qc @ state + ((qc @ kc.transpose(-2, -1)) * decay) @ delta)"),
    # 9.1: the keys written into the next state without their decay to the chunk's end
    "9.1 keys not decayed to the end": (
        "        kc_end = kc * torch.exp(b[..., -1:] - b).unsqueeze(-1)",
        "        kc_end = kc"),
    # 9.1: the correction from S_in without its decay (W built from β k only)
    "9.1 W without the decay": (
        "        rhs = torch.cat([bc[..., None] * vc, (bc * torch.exp(b))[..., None] * kc], dim=-1)",
        "        rhs = torch.cat([bc[..., None] * vc, bc[..., None] * kc], dim=-1)"),
    # 9.1: β ignored in the triangular system (the whole error written at every token)
    "9.1 beta ignored": (
        "        lower = torch.tril(bc[..., None] * (kc @ kc.transpose(-2, -1)) * decay, diagonal=-1)",
        "        lower = torch.tril((kc @ kc.transpose(-2, -1)) * decay, diagonal=-1)",
        "        rhs = torch.cat([bc[..., None] * vc, (bc * torch.exp(b))[..., None] * kc], dim=-1)",
        "        rhs = torch.cat([vc, torch.exp(b)[..., None] * kc], dim=-1)"),
    # 9.1: the initial state dropped
    "9.1 zero start": (
        "    state = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state\n    outs = []\n"
        "    for start in range(0, N, chunk_size):  # N/C chunks; the last may be shorter\n"
        "        stop = min(start + chunk_size, N)\n        qc, kc, vc, bc",
        "    state = q.new_zeros(B, H, Dk, v.shape[-1])\n    outs = []\n"
        "    for start in range(0, N, chunk_size):  # N/C chunks; the last may be shorter\n"
        "        stop = min(start + chunk_size, N)\n        qc, kc, vc, bc"),
    # 9.1: the decay factored as exp(b_i)·exp(−b_j): fine for gentle gates, inf·0 = NaN for closing ones
    "9.1 factored exponentials": (
        "        decay = torch.exp((b[..., :, None] - b[..., None, :]).masked_fill(~below, float(\"-inf\")))",
        "        decay = (torch.exp(b)[..., :, None] * torch.exp(-b)[..., None, :]) * below"),
    # 9.1: right values, but one token at a time whatever chunk_size: N sequential steps, not N/C
    "9.1 token loop": (
        "    for start in range(0, N, chunk_size):  # N/C chunks; the last may be shorter\n"
        "        stop = min(start + chunk_size, N)",
        "    for start in range(0, N):  # chunk_size ignored\n        stop = start + 1"),
    # 9.2: the chunk remainder dropped (right only when chunk_size divides N)
    "9.2 remainder dropped": (
        "    for start in range(0, N, chunk_size):  # the last chunk may be shorter",
        "    for start in range(0, N - N % chunk_size if chunk_size <= N else N, chunk_size):"),
    # 9.2: the gates accumulated along the feature axis instead of the tokens
    "9.2 cumsum on the wrong axis": (
        "        b = log_gate[:, :, start:stop].cumsum(dim=2)",
        "        b = log_gate[:, :, start:stop].cumsum(dim=-1)"),
    # 9.2: notebook 09's scalar decay: one gate per head, the features' mean
    "9.2 scalar decay": (
        "        b = log_gate[:, :, start:stop].cumsum(dim=2)",
        "        b = log_gate[:, :, start:stop].mean(-1, keepdim=True).cumsum(dim=2).expand_as(qc)"),
    # 9.2: the decay factored as exp(b_i)·exp(−b_j): fine for gentle gates, inf·0 = NaN for closing ones
    "9.2 factored exponentials": (
        "        scores = (qc[:, :, :, None, :] * kc[:, :, None, :, :] * torch.exp(gap)).sum(-1)",
        "        scores = ((qc * torch.exp(b)) @ (kc * torch.exp(-b)).transpose(-2, -1)) * below"),
    # 9.2: right values, but the whole sequence as one chunk: an (N x N) matrix per head
    "9.2 one chunk": (
        "    for start in range(0, N, chunk_size):  # the last chunk may be shorter\n"
        "        stop = min(start + chunk_size, N)",
        "    for start in range(0, N, N):\n        stop = N"),
    # 9.2: right values, but one token at a time whatever chunk_size: N sequential steps, not N/C
    "9.2 token loop": (
        "    for start in range(0, N, chunk_size):  # the last chunk may be shorter\n"
        "        stop = min(start + chunk_size, N)",
        "    for start in range(0, N):  # chunk_size ignored\n        stop = start + 1"),
    # 9.3: the gate left out (right when α = 1: the notebook's ungated writes)
    "9.3 gate ignored": (
        "    alpha, c = torch.exp(log_alpha), (k * k).sum(-1)  # (B, H)",
        "    alpha, c = torch.ones_like(log_alpha), (k * k).sum(-1)"),
    # 9.3: the decay on the write too, S ← α (S + β k (v − Sᵀk)ᵀ) (right when α = 1)
    "9.3 write decayed": (
        "    return rho[..., None] ** t * start + ((1 - alpha) * (1 - beta * c) * geometric)[..., None] * v",
        "    return rho[..., None] ** t * start + ((1 - alpha) * geometric)[..., None] * v"),
    # 9.3: a unit key assumed (right in the notebook's case)
    "9.3 unit key": (
        "    alpha, c = torch.exp(log_alpha), (k * k).sum(-1)  # (B, H)",
        "    alpha, c = torch.exp(log_alpha), torch.ones_like(log_alpha)"),
    # 9.3: the geometric sum as (1 − ρ^t)/(1 − ρ) everywhere: 0/0 = NaN where ρ = 1 (α = 1, β = 0)
    "9.3 divides by 1 - rho": (
        "    geometric = torch.where(flat, float(t), (1 - rho ** t) / torch.where(flat, 2.0, 1 - rho))",
        "    geometric = (1 - rho ** t) / (1 - rho)"),
    # 9.3: right values, by writing t times (the loop the task asks to replace)
    "9.3 write loop": (
        "    return rho[..., None] ** t * start + ((1 - alpha) * (1 - beta * c) * geometric)[..., None] * v",
        "    e = start\n    for _ in range(t):\n        e = rho[..., None] * e + ((1 - alpha) * (1 - beta * c))[..., None] * v\n"
        "    return e"),
    # 9.4: equal memory taken for "more" (off by one when the ratio is a whole number)
    "9.4 ceil": (
        "    return state // per_token + 1",
        "    return max(1, -(-state // per_token))"),
    # 9.4: the KV cache without its factor 2 (keys only)
    "9.4 keys only": (
        "    per_token = 2 * dim_head * kv_itemsize",
        "    per_token = dim_head * kv_itemsize"),
    # 9.4: the state in the cache's number format
    "9.4 one itemsize": (
        "    state = dim_k * dim_v * state_itemsize",
        "    state = dim_k * dim_v * kv_itemsize"),
    # 9.4: the recurrent state counted in every layer of the hybrid
    "9.4 states everywhere": (
        "    return state // per_token + 1",
        "    return (layers * state) // ((layers - exact_layers) * per_token) + 1"),
    # 9.4: no check of the layer counts
    "9.4 no checks": (
        "    if not 0 <= exact_layers <= layers:",
        "    if exact_layers < 0:"),
    # 9.4: only too many exact layers rejected, not a negative count
    "9.4 no negative check": (
        "    if not 0 <= exact_layers <= layers:",
        "    if exact_layers > layers:"),
    # 9.5: the weights factored as exp(b_i)·exp(−b_j): fine for gentle gates, 0·inf = NaN for gates that close hard
    "9.5 factored exponentials": (
        "        Gamma = torch.exp(gap.masked_fill(~torch.ones(c, c, dtype=torch.bool, device=q.device).tril(), -math.inf))",
        "        Gamma = (torch.exp(cum)[..., :, None] * torch.exp(-cum)[..., None, :]).tril()"),
    # 9.5: an exclusive cumulative sum (the own gate left out): the read of S_in and every weight off by one gate
    "9.5 cumsum without the own gate": (
        "        cum = log_alpha[:, :, first:first + chunk_size].cumsum(dim=-1)",
        "        cum = log_alpha[:, :, first:first + chunk_size].cumsum(dim=-1) - log_alpha[:, :, first:first + chunk_size]"),
    # 9.5: the carried state read without the decay from the chunk's start (notebook's γ^(i+1) forgotten)
    "9.5 undecayed read of S_in": (
        "        outs.append(torch.exp(cum)[..., None] * (Qc @ S) + ((Qc @ Kc.transpose(-2, -1)) * Gamma) @ Vc)",
        "        outs.append(Qc @ S + ((Qc @ Kc.transpose(-2, -1)) * Gamma) @ Vc)"),
    # 9.5: the initial state ignored (right when none is given)
    "9.5 zero start": (
        "    S = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state  # (B, H, Dk, Dv)",
        "    S = q.new_zeros(B, H, Dk, v.shape[-1])"),
    # 9.5: the ragged last chunk dropped (right only when chunk_size divides N, as in the notebook's version)
    "9.5 ragged chunk dropped": (
        "    for first in range(0, N, chunk_size):  # N/C steps; a ragged last chunk holds the remaining tokens",
        "    for first in range(0, N - N % chunk_size if chunk_size <= N else N, chunk_size):"),
    # 9.5: no causal mask inside the chunk (exp(b_i − b_j) > 1 for j > i: later tokens leak into earlier outputs)
    "9.5 no mask": (
        "        Gamma = torch.exp(gap.masked_fill(~torch.ones(c, c, dtype=torch.bool, device=q.device).tril(), -math.inf))",
        "        Gamma = torch.exp(gap)"),
    # 9.5: right values, but one token at a time whatever chunk_size: N sequential steps, not N/C
    "9.5 token loop": (
        "    for first in range(0, N, chunk_size):  # N/C steps; a ragged last chunk holds the remaining tokens\n"
        "        Qc, Kc, Vc = (x[:, :, first:first + chunk_size] for x in (q, k, v))",
        "    for first in range(0, N):  # chunk_size ignored\n"
        "        Qc, Kc, Vc = (x[:, :, first:first + 1] for x in (q, k, v))",
        "        cum = log_alpha[:, :, first:first + chunk_size].cumsum(dim=-1)",
        "        cum = log_alpha[:, :, first:first + 1].cumsum(dim=-1)"),
    # 9.5: right values, but the whole sequence as one chunk: an (N x N) matrix per head
    "9.5 one chunk": (
        "    for first in range(0, N, chunk_size):  # N/C steps; a ragged last chunk holds the remaining tokens\n"
        "        Qc, Kc, Vc = (x[:, :, first:first + chunk_size] for x in (q, k, v))",
        "    for first in range(0, N, N):\n"
        "        Qc, Kc, Vc = (x[:, :, first:first + N] for x in (q, k, v))",
        "        cum = log_alpha[:, :, first:first + chunk_size].cumsum(dim=-1)",
        "        cum = log_alpha[:, :, first:first + N].cumsum(dim=-1)"),
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
    q, k, v = (torch.randn(2, 2, 8, 4, generator=g, dtype=torch.float64) for _ in range(3))
    gate = torch.nn.functional.logsigmoid(torch.randn(2, 2, 8, 4, generator=g, dtype=torch.float64))
    beta, log_alpha = torch.sigmoid(gate[..., 0]), gate[..., 1]
    right = solved["chunked_gated_delta"](q, k, v, beta, log_alpha, 4)
    for name in ("9.1 zero start", "9.1 factored exponentials", "9.1 token loop"):  # no initial state; gentle gates
        for got, expected in zip(load(name)["chunked_gated_delta"](q, k, v, beta, log_alpha, 4), right):
            assert torch.allclose(got, expected, atol=1e-12), name
    no_gate = torch.zeros_like(beta)  # α = 1: the notebook's ungated chunk form
    for got, expected in zip(load("9.1 no decay in L")["chunked_gated_delta"](q, k, v, beta, no_gate, 4),
                             solved["chunked_gated_delta"](q, k, v, beta, no_gate, 4)):
        assert torch.allclose(got, expected, atol=1e-12)
    right = solved["chunked_gla"](q, k, v, gate, 4)
    for name in ("9.2 remainder dropped", "9.2 factored exponentials", "9.2 one chunk", "9.2 token loop"):  # 4 divides 8; gentle gates
        for got, expected in zip(load(name)["chunked_gla"](q, k, v, gate, 4), right):
            assert torch.allclose(got, expected, atol=1e-12), name
    head_gate = gate[..., :1].expand_as(gate)  # one gate per head: the notebook's scalar decay
    for got, expected in zip(load("9.2 scalar decay")["chunked_gla"](q, k, v, head_gate, 4),
                             solved["chunked_gla"](q, k, v, head_gate, 4)):
        assert torch.allclose(got, expected, atol=1e-12)
    s0, kk, vv = torch.randn(2, 2, 4, 3, generator=g), torch.randn(2, 2, 4, generator=g), torch.randn(2, 2, 3, generator=g)
    bb, la = torch.rand(2, 2, generator=g) * 0.2, -torch.rand(2, 2, generator=g)
    write = lambda name, *args: load(name)["repeated_write_error"](s0, *args, 5)
    right = lambda *args: solved["repeated_write_error"](s0, *args, 5)
    for name in ("9.3 divides by 1 - rho", "9.3 write loop"):  # β > 0: ρ ≠ 1
        assert torch.allclose(write(name, kk, vv, bb, la), right(kk, vv, bb, la), atol=1e-6), name
    no_gate = torch.zeros_like(la)  # α = 1: section 1's writes
    for name in ("9.3 gate ignored", "9.3 write decayed"):
        assert torch.allclose(write(name, kk, vv, bb, no_gate), right(kk, vv, bb, no_gate), atol=1e-6), name
    unit_k = torch.nn.functional.normalize(kk, dim=-1)
    assert torch.allclose(write("9.3 unit key", unit_k, vv, bb, la), right(unit_k, vv, bb, la), atol=1e-6)
    assert load("9.4 ceil")["memory_crossover"](16, 4, 8, 96, 64, 80, 2, 4) == 54
    assert load("9.4 states everywhere")["memory_crossover"](10, 0, 4, 32, 48, 40, 4, 4) == 31


def test_the_95_mutants_are_right_somewhere():
    """Task 9.5's mutants, each right on the case it was made to fool: gentle gates, no initial state, whole
    chunks, or any case at all (the token loop and the one chunk give the right values by the wrong route)."""
    solved, ns = {}, {}
    exec(SOLUTION_FILE.read_text(encoding="utf-8"), solved)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 8, d, generator=g, dtype=torch.float64) for d in (4, 4, 3))
    log_alpha = torch.nn.functional.logsigmoid(torch.randn(2, 2, 8, generator=g, dtype=torch.float64) + 1)
    right = solved["chunked_gated_retention"](q, k, v, log_alpha, 4)
    for name in ("9.5 factored exponentials", "9.5 zero start", "9.5 ragged chunk dropped", "9.5 token loop",
                 "9.5 one chunk"):
        ns = {}
        exec(mutant(name), ns)
        for got, expected in zip(ns["chunked_gated_retention"](q, k, v, log_alpha, 4), right):
            assert torch.allclose(got, expected, atol=1e-12), name
