"""minilin.gated: retention, GLA, DeltaNet and Gated DeltaNet in chunks against their token-by-token
definition (`recurrent_reference`), in float64 at TOL (helpers.py: 1e-10; the measured gap is ~1e-14).

Inputs: keys of the delta rules are L2-normalised (as the papers' models do): with |k| = 1 and β <= 1 the
delta rule's transition I − β k kᵀ has eigenvalues in [0, 1], so the state stays bounded and a float64
comparison at 1e-10 is meaningful over 200 tokens.
"""
import math
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import TOL, gen

from minilin import gated
from minilin.probes import future_leakage

VARIANTS = ("retention", "gla", "gla-per-head", "deltanet", "gated-deltanet")


def inputs(name, B=2, H=3, N=20, Dk=5, Dv=4, seed=0, dtype=torch.float64):
    """(q, k, v, gates) for one variant: gates are the keyword arguments of both forms."""
    g = gen(seed)
    q, k, v = (torch.randn(B, H, N, d, generator=g, dtype=dtype) for d in (Dk, Dk, Dv))
    if name == "retention":
        gamma = torch.tensor([0.9, 0.5, 1.0][:H] + [0.99] * (H - 3), dtype=dtype)
        return q, k, v, dict(gamma=gamma), dict(log_decay=torch.log(gamma).view(1, H, 1).expand(B, H, N))
    if name in ("gla", "gla-per-head"):
        shape = (B, H, N, Dk) if name == "gla" else (B, H, N)
        log_gate = F.logsigmoid(torch.randn(*shape, generator=g, dtype=dtype))
        return q, k, v, dict(log_gate=log_gate), dict(log_decay=log_gate)
    k = F.normalize(k, dim=-1)
    beta = torch.sigmoid(torch.randn(B, H, N, generator=g, dtype=dtype))
    if name == "deltanet":
        return q, k, v, dict(beta=beta), dict(beta=beta)
    log_alpha = F.logsigmoid(torch.randn(B, H, N, generator=g, dtype=dtype))
    return q, k, v, dict(beta=beta, log_alpha=log_alpha), dict(beta=beta, log_decay=log_alpha)


def chunked(name, q, k, v, gates, **kw):
    fn = {"retention": gated.retention, "gla": gated.gla, "gla-per-head": gated.gla, "deltanet": gated.delta_rule,
          "gated-deltanet": gated.gated_delta_rule}[name]
    return fn(q, k, v, **gates, **kw)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("N", [1, 5, 63, 64, 65, 200])
@pytest.mark.parametrize("chunk_size", [1, 7, 16, 64])
def test_chunked_equals_recurrence(name, N, chunk_size):
    q, k, v, gates, ref_gates = inputs(name, N=N, seed=N)
    state0 = torch.randn(2, 3, 5, 4, generator=gen(1), dtype=torch.float64)
    for init in (None, state0):
        out, state = chunked(name, q, k, v, gates, initial_state=init, return_state=True, chunk_size=chunk_size)
        ref, ref_state = gated.recurrent_reference(q, k, v, **ref_gates, initial_state=init, return_state=True)
        assert out.shape == ref.shape == (2, 3, N, 4)
        torch.testing.assert_close(out, ref, atol=TOL, rtol=0)
        torch.testing.assert_close(state, ref_state, atol=TOL, rtol=0)


@pytest.mark.parametrize("name", VARIANTS)
def test_state_passing_equals_one_pass(name):
    q, k, v, gates, _ = inputs(name, N=50)
    whole, s_whole = chunked(name, q, k, v, gates, return_state=True, chunk_size=16)
    cut = 23
    first = {key: t[:, :, :cut] if t.ndim >= 3 else t for key, t in gates.items()}
    second = {key: t[:, :, cut:] if t.ndim >= 3 else t for key, t in gates.items()}
    o1, s1 = chunked(name, q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], first, return_state=True, chunk_size=16)
    o2, s2 = chunked(name, q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], second, initial_state=s1,
                     return_state=True, chunk_size=16)
    torch.testing.assert_close(torch.cat([o1, o2], dim=2), whole, atol=TOL, rtol=0)
    torch.testing.assert_close(s2, s_whole, atol=TOL, rtol=0)


@pytest.mark.parametrize("name", VARIANTS)
def test_gradcheck(name):
    q, k, v, gates, _ = inputs(name, B=1, H=3, N=9, Dk=3, Dv=2)
    state0 = torch.randn(1, 3, 3, 2, generator=gen(2), dtype=torch.float64)
    tensors = [q, k, v, state0] + [t for t in gates.values() if t.ndim >= 3]
    names = [key for key, t in gates.items() if t.ndim >= 3]
    fixed = {key: t for key, t in gates.items() if t.ndim < 3}

    def fn(q, k, v, s0, *gate_values):
        if name in ("deltanet", "gated-deltanet"):
            k = F.normalize(k, dim=-1)
        kw = dict(zip(names, gate_values), **fixed)
        out, state = chunked(name, q, k, v, kw, initial_state=s0, return_state=True, chunk_size=4)
        return out, state

    # gates enter through a clamp-free path; perturbing β or a log-gate by 1e-6 keeps them in range
    inputs_ = [t.clone().requires_grad_(True) for t in tensors]
    if name in ("deltanet", "gated-deltanet"):
        inputs_[4] = (tensors[4].clamp(0.05, 0.95)).requires_grad_(True)
    assert torch.autograd.gradcheck(fn, inputs_, eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", VARIANTS)
def test_no_future_dependence(name):
    """∂ o_t / ∂ (q, k, v, gates)_s = 0 exactly for s > t: every input stacked along one sequence axis."""
    q, k, v, gates, _ = inputs(name, B=1, H=3, N=12)
    gate_keys = [key for key, t in gates.items() if t.ndim >= 3]
    parts = [q, k, v] + [gates[key] if gates[key].ndim == 4 else gates[key][..., None] for key in gate_keys]
    widths = [p.shape[-1] for p in parts]
    x = torch.cat(parts, dim=-1)

    def fn(x):
        pieces = list(torch.split(x, widths, dim=-1))
        kw = {key: (p if gates[key].ndim == 4 else p[..., 0]) for key, p in zip(gate_keys, pieces[3:])}
        if "beta" in kw:
            kw["beta"] = torch.sigmoid(kw["beta"])  # stays in [0, 1] under the probe's perturbations
        for key in ("log_gate", "log_alpha"):
            if key in kw:
                kw[key] = -F.softplus(kw[key])
        kw.update({key: t for key, t in gates.items() if t.ndim < 3})
        return chunked(name, *pieces[:3], kw, chunk_size=5)

    assert future_leakage(fn, x, seq_dim=2, generator=gen(3)) == 0.0


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_non_finite_input_reaches_no_earlier_output(name, where):
    q, k, v, gates, _ = inputs(name, N=30)
    clean = chunked(name, q, k, v, gates, chunk_size=16)
    t = {"q": q, "k": k, "v": v}[where].clone()
    t[:, :, 20] = float("nan")
    args = dict(q=q, k=k, v=v)
    args[where] = t
    out = chunked(name, args["q"], args["k"], args["v"], gates, chunk_size=16)
    assert torch.equal(out[:, :, :20], clean[:, :, :20])  # bit-identical before it
    assert torch.isnan(out[:, :, 20]).all()  # NaN where it is, never a silent zero


def test_gate_of_minus_infinity_forgets_everything():
    q, k, v, gates, _ = inputs("gla-per-head", N=12)
    log_gate = gates["log_gate"].clone()
    log_gate[:, :, 6] = float("-inf")
    out = gated.gla(q, k, v, log_gate, chunk_size=4)
    later = log_gate[:, :, 6:].clone()
    later[:, :, 0] = 0.0  # token 6's gate acts on an empty state in the fresh run: any value will do
    fresh = gated.gla(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], later, chunk_size=4)
    torch.testing.assert_close(out[:, :, 6:], fresh, atol=TOL, rtol=0)  # nothing before token 6 survives


@pytest.mark.parametrize("name", ["gla", "gated-deltanet"])
@pytest.mark.parametrize("chunk_size", [4, 5, 64])   # the closed gate first in its chunk, inside one, one chunk
def test_closed_gate_in_the_chunks_is_the_token_loop_with_a_zero(name, chunk_size):
    """A log gate of −∞ at token 8 (GLA: on half the key features) goes through the chunked form's cumulative
    sums as the token loop written with a 0 by hand (no exp(−∞)); the notebook's reset demo relies on it."""
    q, k, v, gates, _ = inputs(name, N=16)
    gate = torch.ones(2, 3, 16, 5, dtype=torch.float64)       # 1: open, 0: closed
    gate[:, :, 8, :3 if name == "gla" else 5] = 0.0
    if name == "gla":
        gates["log_gate"] = gate.log()
    else:
        gate = gate[..., 0]
        gates["log_alpha"] = gate.log()
    out, state = chunked(name, q, k, v, gates, return_state=True, chunk_size=chunk_size)
    S, outs = torch.zeros(2, 3, 5, 4, dtype=torch.float64), []
    for t in range(16):
        k_t, v_t = k[:, :, t, :, None], v[:, :, t, None, :]
        if name == "gla":                                     # S = diag(α_t) S + k vᵀ
            S = gate[:, :, t, :, None] * S + k_t * v_t
        else:                                                 # S = α_t (I − β k kᵀ) S + β k vᵀ
            b, a = gates["beta"][:, :, t, None, None], gate[:, :, t, None, None]
            S = a * (S - b * k_t * (k_t.transpose(-2, -1) @ S)) + b * k_t * v_t
        outs.append((q[:, :, t, None, :] @ S)[..., 0, :] / 5 ** 0.5)
    assert out.isfinite().all()
    torch.testing.assert_close(out, torch.stack(outs, dim=2), atol=TOL, rtol=0)
    torch.testing.assert_close(state, S, atol=TOL, rtol=0)


def test_strong_per_feature_gates_stay_finite_in_float32():
    """Gates that close by more than e^-44 over a chunk (where exp(−b) would overflow float32) take the
    entry-by-entry path: float32 agrees with the float64 reference."""
    q, k, v, gates, _ = inputs("gla", N=70, dtype=torch.float64)
    log_gate = gates["log_gate"] * 8  # mean log-gate ≈ −6: a chunk of 16 closes by ≈ e^-100
    ref = gated.recurrent_reference(q, k, v, log_decay=log_gate)
    out = gated.gla(q.float(), k.float(), v.float(), log_gate.float(), chunk_size=16)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", VARIANTS)
def test_half_precision_computes_in_float32(name, dtype):
    q, k, v, gates, ref_gates = inputs(name, N=40)
    half = [t.to(dtype) for t in (q, k, v)]
    half_gates = {key: t.to(dtype) for key, t in gates.items()}
    out, state = chunked(name, *half, half_gates, return_state=True)
    assert out.dtype == dtype and state.dtype == torch.float32
    # the reference on the same rounded inputs, in float64: only the float32 arithmetic and the final rounding differ
    ref = gated.recurrent_reference(*(t.double() for t in half),
                                    **{key: t.to(dtype).double() for key, t in ref_gates.items()})
    eps = torch.finfo(dtype).eps
    assert float((out.double() - ref).abs().max()) <= 4 * eps * max(1.0, float(ref.abs().max()))


def test_scale_and_empty_sequence():
    q, k, v, gates, _ = inputs("deltanet", N=10)
    default = gated.delta_rule(q, k, v, gates["beta"])  # default scale: Dk^-1/2 on q
    explicit = gated.delta_rule(q * 5 ** -0.5, k, v, gates["beta"], scale=1.0)
    torch.testing.assert_close(default, explicit, atol=TOL, rtol=0)
    assert float((gated.delta_rule(q, k, v, gates["beta"], scale=1.0) - default).abs().max()) > 0.1
    s0 = torch.ones(2, 3, 5, 4, dtype=torch.float64)
    out, state = gated.delta_rule(q[:, :, :0], k[:, :, :0], v[:, :, :0], gates["beta"][:, :, :0],
                                  initial_state=s0, return_state=True)
    assert out.shape == (2, 3, 0, 4) and torch.equal(state, s0)


def test_repeated_writes_converge_under_the_delta_rule():
    """Writing (k, v) again: linear attention's state piles up (S k grows linearly), the delta rule's
    converges to v (β = 1: exactly after one write, unit-norm k)."""
    k = F.normalize(torch.randn(1, 1, 1, 8, generator=gen(4), dtype=torch.float64), dim=-1).expand(1, 1, 6, 8)
    v = torch.randn(1, 1, 1, 3, generator=gen(5), dtype=torch.float64).expand(1, 1, 6, 3)
    q = k * math.sqrt(8)  # read back with the key itself (undoing the default Dk^-1/2)
    ones = torch.ones(1, 1, 6, dtype=torch.float64)
    delta = gated.delta_rule(q, k, v, ones)
    plain = gated.retention(q, k, v, 1.0)
    torch.testing.assert_close(delta, v.expand_as(delta), atol=TOL, rtol=0)
    torch.testing.assert_close(plain, v * torch.arange(1, 7, dtype=torch.float64).view(1, 1, 6, 1), atol=TOL, rtol=0)


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v, g: gated.gla(q, k, v, -g.abs()[..., :2]), "log_gate must be a floating-point tensor of shape"),
    (lambda q, k, v, g: gated.gla(q, k, v, g.abs() + 0.1), "log_gate must be <= 0"),
    (lambda q, k, v, g: gated.delta_rule(q, F.normalize(k, dim=-1), v, torch.full(q.shape[:3], 1.5, dtype=q.dtype)),
     "beta * |k|^2 must lie in [0, 1]"),
    (lambda q, k, v, g: gated.delta_rule(q, k, v, torch.full(q.shape[:3], -0.1, dtype=q.dtype)), "beta must be >= 0"),
    (lambda q, k, v, g: gated.gated_delta_rule(q, k, v, torch.ones(q.shape[:3], dtype=q.dtype), g),
     "log_alpha must be a floating-point tensor of shape"),
    (lambda q, k, v, g: gated.retention(q, k, v, torch.tensor([0.5, 1.2, 0.9])), "gamma must lie in"),
    (lambda q, k, v, g: gated.retention(q, k, v, torch.tensor([0.5, 0.9])), "gamma must have shape"),
    (lambda q, k, v, g: gated.retention(q, k[:, :, :-1], v[:, :, :-1], 0.9), "same number of positions"),
    (lambda q, k, v, g: gated.retention(q, k, v, 0.9, chunk_size=0), "chunk_size must be a positive int"),
    (lambda q, k, v, g: gated.retention(q, k, v, 0.9, initial_state=torch.zeros(2, 3, 4, 4)), "initial_state must"),
    (lambda q, k, v, g: gated.retention(q[0], k[0], v[0], 0.9), "must have shape (batch, heads, seq, head_dim)"),
])
def test_bad_input_names_the_fix(call, message):
    q, k, v, gates, _ = inputs("gla", N=6)
    with pytest.raises(ValueError, match=re.escape(message)):
        call(q, k, v, gates["log_gate"])


def test_state_bytes_formula():
    assert gated.state_bytes(64, 64, heads=4, layers=2) == 2 * 4 * 64 * 64 * 4
    assert gated.state_bytes(64, 32, heads=1, dtype=torch.float16) == 64 * 32 * 2
    torch.testing.assert_close(gated.retention_gammas(3), torch.tensor([1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128],
                                                                      dtype=torch.float64))


@pytest.mark.parametrize("fn", ["delta_rule", "gated_delta_rule"])
def test_beta_rule_is_the_eigenvalue_bound(fn):
    """The transition I − β k kᵀ has eigenvalues 1 and 1 − β|k|²: the state stays bounded iff 0 <= β|k|² <= 2.
    Default: β|k|² <= 1 (eigenvalues in [0, 1]); allow_neg_eigval=True: up to 2 (arXiv 2411.12537, fla's option).
    β <= 1 with keys longer than 1 is refused (it diverges), β = 1.9 with unit keys is allowed only by the option."""
    q, k, v, gates, _ = inputs("gated-deltanet", N=64, Dk=8, Dv=3, seed=7)
    extra = (gates["log_alpha"].clamp(min=-1e-3),) if fn == "gated_delta_rule" else ()  # α ≈ 1: no decay hides growth
    call = lambda k, beta, **kw: getattr(gated, fn)(q, k, v, beta, *extra, chunk_size=16, **kw)
    full = lambda b: torch.full(q.shape[:3], b, dtype=q.dtype)
    # unit keys: β in (1, 2] only with allow_neg_eigval; it then equals the definition and stays bounded
    with pytest.raises(ValueError, match=r"allow_neg_eigval=True.*2411\.12537"):
        call(k, full(1.9))
    for b in (1.5, 1.9, 2.0):
        out = call(k, full(b), allow_neg_eigval=True)
        want = gated.recurrent_reference(q, k, v, beta=full(b), log_decay=extra[0] if extra else None)
        torch.testing.assert_close(out, want, rtol=0, atol=1e-9)
        assert out.abs().max() < 10 * v.abs().max()
    with pytest.raises(ValueError, match=r"beyond 2 the eigenvalue"):
        call(k, full(2.1), allow_neg_eigval=True)
    # keys of length 2 with β = 0.9: β|k|² = 3.6, eigenvalue −2.6: refused, and the definition indeed blows up
    long_k = 2 * k
    with pytest.raises(ValueError, match=r"got a maximum of 3\.6.*F\.normalize\(k, dim=-1\)"):
        call(long_k, full(0.9))
    with pytest.raises(ValueError, match=r"beta \* \|k\|\^2 must lie in \[0, 2\]"):
        call(long_k, full(0.9), allow_neg_eigval=True)
    blown = gated.recurrent_reference(q, long_k, v, beta=full(0.9))
    assert blown.abs().max() > 1e6 * v.abs().max()
    # at the bound: β|k|² = 1 exactly with keys of length 2 (β = 1/4) is accepted
    call(long_k, full(0.25))
