"""minilin.gated against flash-linear-attention's pure-PyTorch references (`fla.ops.*.naive`, fla-core 0.6.0).

Install with `pip install -e ".[fla]"` (fla-core and triton: fla's modules import triton even on a CPU, where
only the naive references run). Skipped without fla, except under MINILIN_REQUIRE_FLA=1 (CI), where its
absence fails.

Precision: fla's references cast every input to float32 inside (`.float()`), so the comparison is in float32:
both sides get the same float32 inputs, ours computes in float64. Over N = 40 tokens of O(1) terms the float32
round-off is below 40 · 1.2e-7 · (largest partial sum, ~10) ≈ 5e-5, so the bound is 1e-4 · max(1, |ref|). A
wrong convention (the scale, a gate applied after the write instead of before, a transposed state, β on the
wrong side) is an O(1) difference; `test_the_comparison_can_fail` checks that the bound sees one.
"""
import os

import pytest
import torch
import torch.nn.functional as F
from helpers import gen

if not os.environ.get("MINILIN_REQUIRE_FLA"):
    pytest.importorskip("fla", reason="flash-linear-attention is not installed (pip install -e '.[fla]')")

import warnings  # noqa: E402

with warnings.catch_warnings():  # "Triton is not supported on current platform, roll back to CPU."
    warnings.simplefilter("ignore")
    from fla.ops.delta_rule.naive import delta_rule_recurrence  # noqa: E402
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule  # noqa: E402
    from fla.ops.gla.naive import naive_recurrent_gla  # noqa: E402
    from fla.ops.retention.naive import naive_retention  # noqa: E402
    from fla.ops.simple_gla.naive import naive_recurrent_simple_gla  # noqa: E402

from minilin import gated  # noqa: E402

pytestmark = [pytest.mark.peers, pytest.mark.usefixtures("one_thread")]
B, H, N, Dk, Dv = 2, 4, 40, 8, 6


def data(seed=0):
    g = gen(seed)
    q, k, v = (torch.randn(B, H, N, d, generator=g).float() for d in (Dk, Dk, Dv))
    return dict(q=q, k=k, v=v, kn=F.normalize(k, dim=-1),
                log_gate=F.logsigmoid(torch.randn(B, H, N, Dk, generator=g)).float(),
                log_alpha=F.logsigmoid(torch.randn(B, H, N, generator=g)).float(),
                beta=torch.sigmoid(torch.randn(B, H, N, generator=g)).float(),
                state=torch.randn(B, H, Dk, Dv, generator=g).float())


def bthd(t):  # (B, H, N, ...) -> fla's (B, N, H, ...)
    return t.transpose(1, 2).contiguous()


def close(ours, theirs):
    theirs = theirs.double()
    bound = 1e-4 * max(1.0, float(theirs.abs().max()))
    err = float((ours.double() - theirs).abs().max())
    assert err <= bound, f"max |minilin - fla| = {err:.3g} > {bound:.3g}"


def d64(*ts):
    return [t.double() for t in ts]


def test_retention():
    x = data()
    theirs = naive_retention(x["q"], x["k"], x["v"])  # (B, H, N, D); RetNet's γ_h = 1 − 2^(−5−h)
    ours = gated.retention(*d64(x["q"], x["k"], x["v"]), gated.retention_gammas(H))
    close(ours, theirs)


@pytest.mark.parametrize("with_state", [False, True])
def test_gla(with_state):
    x = data(1)
    init = x["state"] if with_state else None
    theirs, theirs_state = naive_recurrent_gla(*map(bthd, (x["q"], x["k"], x["v"], x["log_gate"])),
                                               initial_state=init, output_final_state=True)
    ours, state = gated.gla(*d64(x["q"], x["k"], x["v"], x["log_gate"]), return_state=True, chunk_size=16,
                            initial_state=None if init is None else init.double())
    close(ours, theirs.transpose(1, 2))
    close(state, theirs_state)


def test_gla_with_one_gate_per_head_is_fla_simple_gla():
    x = data(2)
    theirs, theirs_state = naive_recurrent_simple_gla(*map(bthd, (x["q"], x["k"], x["v"], x["log_alpha"])),
                                                      initial_state=x["state"])
    ours, state = gated.gla(*d64(x["q"], x["k"], x["v"], x["log_alpha"], ), return_state=True,
                            initial_state=x["state"].double())
    close(ours, theirs.transpose(1, 2))
    close(state, theirs_state)


@pytest.mark.parametrize("with_state", [False, True])
def test_delta_rule(with_state):
    x = data(3)
    init = x["state"] if with_state else None
    theirs, theirs_state = delta_rule_recurrence(x["q"], x["kn"], x["v"], x["beta"], initial_state=init)
    ours, state = gated.delta_rule(*d64(x["q"], x["kn"], x["v"], x["beta"]), return_state=True, chunk_size=16,
                                   initial_state=None if init is None else init.double())
    close(ours, theirs)
    close(state, theirs_state)


@pytest.mark.parametrize("with_state", [False, True])
def test_gated_delta_rule(with_state):
    x = data(4)
    init = x["state"] if with_state else None
    theirs, theirs_state = naive_recurrent_gated_delta_rule(
        *map(bthd, (x["q"], x["kn"], x["v"], x["beta"], x["log_alpha"])), initial_state=init,
        output_final_state=True)
    ours, state = gated.gated_delta_rule(*d64(x["q"], x["kn"], x["v"], x["beta"], x["log_alpha"]),
                                         return_state=True, chunk_size=16,
                                         initial_state=None if init is None else init.double())
    close(ours, theirs.transpose(1, 2))
    close(state, theirs_state)


def test_the_comparison_can_fail():
    """Conventions that differ from fla's by a little are caught: no scale, the gate after the write."""
    x = data(5)
    theirs, _ = naive_recurrent_gated_delta_rule(*map(bthd, (x["q"], x["kn"], x["v"], x["beta"], x["log_alpha"])))
    unscaled = gated.gated_delta_rule(*d64(x["q"], x["kn"], x["v"], x["beta"], x["log_alpha"]), scale=1.0)
    with pytest.raises(AssertionError):
        close(unscaled, theirs.transpose(1, 2))
    shifted = torch.cat([torch.zeros_like(x["log_alpha"][..., :1]), x["log_alpha"][..., :-1]], dim=-1)
    late_gate = gated.gated_delta_rule(*d64(x["q"], x["kn"], x["v"], x["beta"], shifted))
    with pytest.raises(AssertionError):
        close(late_gate, theirs.transpose(1, 2))
