"""Linear attention with decay, gates and the delta rule, on one chunked scan.

Each variant is a recurrence on a state S of shape (B, H, Dk, Dv) (one Dk × Dv matrix per head), read by the
query: o_t = S_tᵀ (scale · q_t). Linear attention (minilin.linear, unnormalised) is S_t = S_{t-1} + k_t v_tᵀ.

    retention         S_t = γ S_{t-1} + k_t v_tᵀ                          RetNet, arXiv 2307.08621, eq. 1-4
    gla               S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ              GLA, arXiv 2312.06635, eq. 3
    delta_rule        S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ        DeltaNet, arXiv 2406.06484, eq. 2
    gated_delta_rule  S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ  Gated DeltaNet, arXiv 2412.06464, eq. 10

γ: (H,) in (0, 1], one decay per head. g: (B, H, N, Dk) ≤ 0, a log-gate per key feature (a (B, H, N) gate, one
per head as in Mamba-2, is taken too). β: (B, H, N), the delta rule's step size, with 0 <= β_t|k_t|² <= 1
(or 2 with allow_neg_eigval=True, negative eigenvalues; arXiv 2411.12537): the stability rule, checked. α = exp(log_alpha),
log_alpha (B, H, N) ≤ 0. All are causal: o_t depends on tokens ≤ t only.

`recurrent_reference` runs the recurrence token by token (the definition; tests, notebook 09 and the grader
compare with it). The functions compute the same thing in chunks of `chunk_size` tokens, with no Python loop
over tokens (arXiv 2312.06635 §3.2; arXiv 2406.06484 §3.2).
The chunk formulas are in `_scan`'s docstring (notebook 09, section 2 derives them; read after Tasks 9.1, 9.2, 9.5).

With no decay or a scalar decay per head (linear attention, retention, a Mamba-2 gate) the states between
chunks come from `minilin.linear.chunk_states`, with no Python loop over chunks; a per-feature gate (GLA) and
the delta rule (a (Dk × Dk) matrix per chunk) carry S between chunks in a Python loop. The delta rule's δ_j = β_j (v_j − α_j S_{j−1}ᵀ k_j)
depends on the state one token earlier; written for a whole chunk it is one unit lower-triangular solve (the
WY/UT representation, arXiv 2406.06484 eq. 7-11; notebook 09 derives it without the gate, and Task 9.1 asks for
the gated form, so this file is best read after that task). A per-feature gate (GLA) makes `_scan`'s exp(b_i − b_j) a vector; it is factored as exp(b_i)·exp(−b_j) when a
chunk's total decay stays within half the dtype's exponent range (44 in float32, 354 in float64), and
computed entry by entry otherwise (slower, never overflowing).

float16/bfloat16 inputs are computed in float32 (and the state is returned in float32). A non-finite input
reaches exactly the outputs at and after its position (NaN, never a silent zero, and never an earlier output).
"""
import math

import torch

from minilin.attention import check_attention_inputs
from minilin.linear import chunk_states



def _floor(dtype):
    """A finite stand-in for a log-gate of −inf (forget everything): exp() of it is exactly 0 in `dtype`
    too (−175 in float32, −1416 in float64), and small enough in size that cumulative sums keep precision."""
    return 2 * math.log(torch.finfo(dtype).tiny)


def _any(t):
    """bool(t.any()), except on the meta device (the benchmark's memory model), where no value exists: there
    the answer is False, the path real in-range, finite inputs take."""
    return t.device.type != "meta" and bool(t.any())


# ---- checks ---------------------------------------------------------------------------------------------

def _compute_dtype(t):
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _check_qkv(q, k, v, chunk_size):
    check_attention_inputs(q, k, v)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k must have the same number of positions (a causal recurrence reads one query "
                         f"per token), got {q.shape[2]} and {k.shape[2]}")
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")


def _check_per_token(name, t, q, *, per_feature=False, how):
    """A (B, H, N) tensor (or (B, H, N, Dk) when per_feature) of q's batch, heads and length."""
    B, H, N, Dk = q.shape
    shapes = [(B, H, N)] + ([(B, H, N, Dk)] if per_feature else [])
    if not isinstance(t, torch.Tensor) or tuple(t.shape) not in shapes or not t.is_floating_point():
        got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        want = " or ".join(str(s) for s in shapes)
        raise ValueError(f"{name} must be a floating-point tensor of shape {want} (batch, heads, seq"
                         f"{', head_dim' if per_feature else ''}), got {got}; {how}")


def _check_log_gate(name, g, q, *, per_feature):
    _check_per_token(name, g, q, per_feature=per_feature,
                     how="compute it from the input, e.g. F.logsigmoid(x @ W) split into heads")
    if _any(g > 0):
        raise ValueError(f"{name} must be <= 0 (a log decay: the state is multiplied by exp({name}) <= 1), got a "
                         f"maximum of {float(g.max()):.3g}; pass F.logsigmoid(logits) or -F.softplus(logits)")


def _check_beta(beta, q, k=None, *, allow_neg_eigval=False):
    """beta >= 0, and with k the stability rule: the delta rule's transition I − β_t k_t k_tᵀ has eigenvalues 1 and
    1 − β_t|k_t|², so the state cannot grow iff 0 <= β_t|k_t|² <= 2. Without allow_neg_eigval the bound is 1
    (eigenvalues in [0, 1], DeltaNet's unit keys and sigmoid β); with it 2 (eigenvalues down to −1: Grazzi et al.,
    arXiv 2411.12537; fla's allow_neg_eigval). A few ulps of the keys' dtype are allowed (normalised keys)."""
    _check_per_token("beta", beta, q, how="e.g. torch.sigmoid(x @ w_beta) split into heads")
    if _any(beta < 0):
        raise ValueError(f"beta must be >= 0 (the delta rule's step size), got a minimum of {float(beta.min()):.3g}; "
                         "pass torch.sigmoid(logits)")
    if k is None:
        return
    limit = 2.0 if allow_neg_eigval else 1.0
    step = beta.to(_compute_dtype(k)) * k.to(_compute_dtype(k)).pow(2).sum(-1)  # (B, H, N): β_t |k_t|²
    if _any(step > limit * (1 + 8 * torch.finfo(k.dtype).eps)):
        fix = ("or allow_neg_eigval=True to allow up to 2 (eigenvalues down to −1, Grazzi et al. arXiv 2411.12537; "
               "then beta = 2 * torch.sigmoid(logits) with unit keys)" if not allow_neg_eigval else
               "beyond 2 the eigenvalue 1 − β|k|² is below −1 and the state grows without bound")
        raise ValueError(f"beta * |k|^2 must lie in [0, {limit:g}] for every token (the delta rule's transition "
                         f"I − β k kᵀ has eigenvalues 1 and 1 − β|k|²; the state cannot grow only while |1 − β|k|²| "
                         f"<= 1), got a maximum of {float(step.max()):.3g}; normalise the keys "
                         f"(F.normalize(k, dim=-1)) and pass beta = torch.sigmoid(logits), {fix}")


def _check_state(state, q, v):
    B, H, _, Dk = q.shape
    want = (B, H, Dk, v.shape[-1])
    if state is None:
        return None
    if not isinstance(state, torch.Tensor) or tuple(state.shape) != want or not state.is_floating_point():
        got = tuple(state.shape) if isinstance(state, torch.Tensor) else type(state).__name__
        raise ValueError(f"initial_state must be a floating-point tensor of shape {want} (batch, heads, "
                         f"key dim, value dim), got {got}; pass the final state of the previous call, or None")
    return state


def _retention_log_decay(gamma, q):
    H = q.shape[1]
    if not isinstance(gamma, torch.Tensor):
        gamma = torch.as_tensor(gamma, dtype=_compute_dtype(q), device=q.device)
    if gamma.ndim == 0:
        gamma = gamma.expand(H)
    if tuple(gamma.shape) != (H,):
        raise ValueError(f"gamma must have shape ({H},), one decay per head, got {tuple(gamma.shape)}")
    if _any((gamma <= 0) | (gamma > 1)):
        raise ValueError(f"gamma must lie in (0, 1] (the state is multiplied by gamma each token), got "
                         f"{gamma.tolist()}; RetNet uses 1 - 2**(-5 - h) for head h (retention_gammas)")
    g = torch.log(gamma.to(device=q.device, dtype=_compute_dtype(q)))
    return g.view(1, H, 1).expand(q.shape[0], H, q.shape[2])


def retention_gammas(heads):
    """RetNet's per-head decays γ_h = 1 − 2^(−5−h), h = 0..heads−1 (arXiv 2307.08621 §2.2)."""
    return 1 - 2.0 ** (-5 - torch.arange(heads, dtype=torch.float64))


# ---- the token-by-token definition --------------------------------------------------------------------------

def step(q_t, k_t, v_t, state, *, log_decay_t=None, beta_t=None):
    """One token of the recurrence: (o_t, S_t) from S_{t-1} (B, H, Dk, Dv).

    q_t, k_t: (B, H, Dk) (q_t already scaled)   v_t: (B, H, Dv)
    log_decay_t: None, (B, H) or (B, H, Dk)   beta_t: None or (B, H)
        S' = exp(log_decay_t) S_{t-1}                      (per row of S when log_decay_t is per feature)
        S_t = S' + k_t v_tᵀ, or with beta: S' + β_t k_t (v_t − S'ᵀ k_t)ᵀ  (= α (I − β k kᵀ) S + β k vᵀ)
        o_t = S_tᵀ q_t
    """
    if log_decay_t is not None:
        a = torch.exp(log_decay_t.clamp(min=_floor(log_decay_t.dtype)))
        state = state * (a[..., None] if a.ndim == 3 else a[..., None, None])
    if beta_t is None:
        state = state + k_t[..., :, None] * v_t[..., None, :]
    else:
        err = v_t - (state * k_t[..., :, None]).sum(-2)  # v_t − S'ᵀ k_t: what the state gets wrong about v_t
        state = state + beta_t[..., None, None] * k_t[..., :, None] * err[..., None, :]
    return (q_t[..., :, None] * state).sum(-2), state


def recurrent_reference(q, k, v, *, log_decay=None, beta=None, scale=None, initial_state=None,
                        return_state=False):
    """The definition, token by token (`step` N times): the reference every chunked form is tested against.

    q, k: (B, H, N, Dk)   v: (B, H, N, Dv)   log_decay: None, (B, H, N) or (B, H, N, Dk), <= 0
    beta: None or (B, H, N) >= 0 (any size: the definition is computed as written, stable or not; the chunked
    delta_rule and gated_delta_rule check the stability rule 0 <= β|k|² <= 1, or 2)
    initial_state: (B, H, Dk, Dv) or None (zeros)
    returns o (B, H, N, Dv), or (o, final state) with return_state=True.
    """
    _check_qkv(q, k, v, 1)
    if log_decay is not None:
        _check_log_gate("log_decay", log_decay, q, per_feature=True)
    if beta is not None:
        _check_beta(beta, q)
    _check_state(initial_state, q, v)
    out_dtype, dtype = q.dtype, _compute_dtype(q)
    B, H, N, Dk = q.shape
    q = q.to(dtype) * (Dk ** -0.5 if scale is None else scale)
    k, v = k.to(dtype), v.to(dtype)
    state = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state.to(dtype)
    outs = []
    for t in range(N):
        o, state = step(q[:, :, t], k[:, :, t], v[:, :, t], state,
                        log_decay_t=None if log_decay is None else log_decay[:, :, t].to(dtype),
                        beta_t=None if beta is None else beta[:, :, t].to(dtype))
        outs.append(o)
    out = (torch.stack(outs, dim=2) if outs else v.new_zeros(B, H, 0, v.shape[-1])).to(out_dtype)
    return (out, state) if return_state else out


# ---- the chunked scan ---------------------------------------------------------------------------------

def _chunk(t, nc, c, fill=0.0):
    """(B, H, N, ...) -> (B, H, nc, c, ...), padded at the end with `fill` (a padded token changes nothing)."""
    pad = nc * c - t.shape[2]
    if pad:
        t = torch.cat([t, t.new_full((*t.shape[:2], pad, *t.shape[3:]), fill)], dim=2)
    return t.reshape(*t.shape[:2], nc, c, *t.shape[3:])


def _vector_intra(q, k, b, tri):
    """A_ij = Σ_d q_id k_jd exp(b_id − b_jd) for j ≤ i (0 above), per chunk: (B, H, nc, c, c).

    Factored as (q exp(b)) (k exp(−b))ᵀ in chunks whose total decay −b_c stays below half the exponent range
    (exp(−b) cannot overflow there); the other chunks entry by entry, through a (c, c, Dk) tensor each."""
    limit = 0.5 * math.log(torch.finfo(b.dtype).max)
    depth = -b[..., -1, :].detach()  # (B, H, nc, Dk): the chunk's total decay, ≥ 0
    unsafe = (depth > limit).any(-1).flatten(0, 1).any(0)  # (nc,): a chunk unsafe for any batch row or head
    if b.device.type == "meta":
        unsafe = torch.zeros(b.shape[2], dtype=torch.bool)  # no values: the path of ordinary gates
    if not bool(unsafe.any()):
        a = (q * torch.exp(b)) @ (k * torch.exp(-b)).transpose(-2, -1)
        return torch.where(tri, a, torch.zeros_like(a))
    b_fast = torch.where(unsafe.to(b.device)[:, None, None], torch.zeros_like(b), b)  # no exp(−b) overflows
    a = (q * torch.exp(b_fast)) @ (k * torch.exp(-b_fast)).transpose(-2, -1)
    idx = unsafe.nonzero().flatten().to(b.device)
    if len(idx):
        exact = []
        for i in idx.tolist():  # only chunks whose gates close by more than e^-44 (float32)
            diff = (b[:, :, i, :, None, :] - b[:, :, i, None, :, :]).masked_fill(~tri[..., None], float("-inf"))
            exact.append((q[:, :, i, :, None, :] * k[:, :, i, None, :, :] * torch.exp(diff)).sum(-1))
        a = a.index_copy(2, idx, torch.stack(exact, dim=2))
    return torch.where(tri, a, torch.zeros_like(a))


def _guarded(p, d):
    """p @ d with rows of d that hold a non-finite value reaching only the rows i ≥ j (p is lower
    triangular; in a plain matmul 0 · NaN would reach earlier rows too)."""
    bad = ~torch.isfinite(d).all(-1)  # (..., c)
    if not _any(bad):
        return p @ d
    out = p @ torch.where(bad[..., None], torch.zeros_like(d), d)
    reached = torch.cummax(bad.int(), dim=-1).values.bool()
    return torch.where(reached[..., None], torch.full_like(out, float("nan")), out)


def _scan(q, k, v, log_decay, beta, initial_state, chunk_size):
    """The chunked form of recurrent_reference (module docstring); q already scaled, all one dtype.

    Inside a chunk, with b_i the cumulative log decay from the chunk's start to token i (so every factor
    exp(b_i − b_j), j ≤ i, is ≤ 1):

        o_i  = exp(b_i) q_i S_0 + Σ_{j ≤ i} (q_i · k_j) exp(b_i − b_j) δ_j         (rows; δ_j = v_j without the delta rule)
        S_C  = exp(b_C) S_0 + Σ_j exp(b_C − b_j) k_j δ_jᵀ
    """
    B, H, N, Dk = q.shape
    Dv = v.shape[-1]
    state = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state.to(q.dtype)
    if N == 0:
        return v.new_zeros(B, H, 0, Dv), state
    c = max(1, min(chunk_size, N))
    nc = -(-N // c)
    qc, kc, vc = _chunk(q, nc, c), _chunk(k, nc, c), _chunk(v, nc, c)
    per_feature = log_decay is not None and log_decay.ndim == 4
    if per_feature and beta is not None:
        raise ValueError("a per-feature gate with the delta rule is not one of the variants here; pass a "
                         "(B, H, N) log-gate (gated_delta_rule) or no beta (gla)")
    no_decay = log_decay is None
    if no_decay:
        log_decay = q.new_zeros(B, H, N)
    b = _chunk(log_decay.clamp(min=_floor(q.dtype)), nc, c).cumsum(dim=3)  # (B, H, nc, c[, Dk])
    tri = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    if per_feature:
        b_end = b[:, :, :, -1:]  # (B, H, nc, 1, Dk)
        q_in = qc * torch.exp(b)  # S_0 read at token i: exp(b_i) ⊙ q_i
        k_out = kc * torch.exp(b_end - b)  # key j brought to the chunk's end
        p = _vector_intra(qc, kc, b, tri)
        carry = torch.exp(b_end).transpose(-2, -1)  # (B, H, nc, Dk, 1): S_0's rows at the chunk's end
    else:
        b_end = b[..., -1:]  # (B, H, nc, 1)
        q_in = qc * torch.exp(b)[..., None]
        k_out = kc * torch.exp(b_end - b)[..., None]
        decay = torch.exp((b[..., :, None] - b[..., None, :]).masked_fill(~tri, float("-inf")))  # (.., c, c)
        p = torch.where(tri, (qc @ kc.transpose(-2, -1)) * decay, torch.zeros_like(decay))
        carry = torch.exp(b_end)[..., None]  # (B, H, nc, 1, 1)
    if beta is None:
        delta, u, w = vc, None, None
        moves = k_out.transpose(-2, -1) @ vc  # (B, H, nc, Dk, Dv): what a chunk writes
    else:
        betac = _chunk(beta, nc, c)  # (B, H, nc, c)
        strict = tri.tril(-1)
        lower = torch.where(strict, betac[..., None] * (kc @ kc.transpose(-2, -1)) * decay,
                            torch.zeros_like(decay))  # L_ij = β_i (k_i·k_j) exp(b_i − b_j), j < i
        eye = torch.eye(c, dtype=q.dtype, device=q.device)
        rhs = torch.cat([betac[..., None] * vc, (betac * torch.exp(b))[..., None] * kc], dim=-1)
        uw = torch.linalg.solve_triangular(lower + eye, rhs, upper=False, unitriangular=True)
        u, w = uw[..., :Dv], uw[..., Dv:]  # Δ = U − W S_0
        moves = k_out.transpose(-2, -1) @ u
        carry = carry * torch.eye(Dk, dtype=q.dtype, device=q.device) - k_out.transpose(-2, -1) @ w  # (.., Dk, Dk)
    if per_feature or beta is not None:
        # A per-feature gate scales each row of the state by its own factor and the delta rule multiplies it by
        # a (Dk × Dk) matrix per chunk: these keep one state update per chunk (nc small steps)
        before = []
        for i in range(nc):
            before.append(state)
            state = (carry[:, :, i] @ state if beta is not None else carry[:, :, i] * state) + moves[:, :, i]
        s0 = torch.stack(before, dim=2)  # (B, H, nc, Dk, Dv): the state each chunk starts from
    else:  # a scalar decay per head and chunk (none, retention, a Mamba-2 gate): no Python loop over chunks
        s0, state = chunk_states(moves, None if no_decay else b_end[..., 0], state)  # s0 (B, H, nc, Dk, Dv):
        # the state each chunk starts from; state: the final one
    if beta is not None:
        delta = u - w @ s0
    out = q_in @ s0 + _guarded(p, delta)  # (B, H, nc, c, Dv)
    return out.reshape(B, H, nc * c, Dv)[:, :, :N], state


def _run(q, k, v, log_decay, beta, scale, initial_state, return_state, chunk_size):
    out_dtype, dtype = q.dtype, _compute_dtype(q)
    Dk = q.shape[-1]
    q = q.to(dtype) * (Dk ** -0.5 if scale is None else scale)
    out, state = _scan(q, k.to(dtype), v.to(dtype), None if log_decay is None else log_decay.to(dtype),
                       None if beta is None else beta.to(dtype), initial_state, chunk_size)
    out = out.to(out_dtype)
    return (out, state) if return_state else out


# ---- the four variants ----------------------------------------------------------------------------------

def retention(q, k, v, gamma, *, scale=None, initial_state=None, return_state=False, chunk_size=64):
    """Retention (RetNet, arXiv 2307.08621 eq. 1-4): o_t = Σ_{s≤t} γ^(t−s) scale·(q_t·k_s) v_s.

    q, k: (B, H, N, Dk)   v: (B, H, N, Dv)   gamma: (H,) in (0, 1] (a float: the same for every head)
    scale: applied to q (None: Dk^-1/2)   initial_state: (B, H, Dk, Dv) or None
    returns o (B, H, N, Dv), or (o, final state (B, H, Dk, Dv)) with return_state=True.
    """
    _check_qkv(q, k, v, chunk_size)
    _check_state(initial_state, q, v)
    return _run(q, k, v, _retention_log_decay(gamma, q), None, scale, initial_state, return_state, chunk_size)


def gla(q, k, v, log_gate, *, scale=None, initial_state=None, return_state=False, chunk_size=64):
    """Gated linear attention (arXiv 2312.06635 eq. 3): S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ, o_t = S_tᵀ(scale·q_t).

    q, k: (B, H, N, Dk)   v: (B, H, N, Dv)   log_gate g: (B, H, N, Dk) <= 0, or (B, H, N) (one gate per head)
    returns o (B, H, N, Dv), or (o, final state) with return_state=True.
    """
    _check_qkv(q, k, v, chunk_size)
    _check_log_gate("log_gate", log_gate, q, per_feature=True)
    _check_state(initial_state, q, v)
    return _run(q, k, v, log_gate, None, scale, initial_state, return_state, chunk_size)


def delta_rule(q, k, v, beta, *, scale=None, initial_state=None, return_state=False, chunk_size=64,
               allow_neg_eigval=False):
    """DeltaNet (arXiv 2406.06484 eq. 2): S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ, o_t = S_tᵀ(scale·q_t).

    The state writes the error of its own prediction S_{t-1}ᵀ k_t, not the value: an online least-squares
    step (with unit-norm keys and β = 1, reading k_t back gives exactly v_t).
    q, k: (B, H, N, Dk)   v: (B, H, N, Dv)   beta: (B, H, N) with 0 <= β_t|k_t|² <= 1 (<= 2 with
    allow_neg_eigval=True: the transition's eigenvalue 1 − β|k|² may then be negative, down to −1; arXiv
    2411.12537); outside, the state can grow without bound, and a ValueError says so.
    returns o (B, H, N, Dv), or (o, final state) with return_state=True.
    """
    _check_qkv(q, k, v, chunk_size)
    _check_beta(beta, q, k, allow_neg_eigval=allow_neg_eigval)
    _check_state(initial_state, q, v)
    return _run(q, k, v, None, beta, scale, initial_state, return_state, chunk_size)


def gated_delta_rule(q, k, v, beta, log_alpha, *, scale=None, initial_state=None, return_state=False,
                     chunk_size=64, allow_neg_eigval=False):
    """Gated DeltaNet (arXiv 2412.06464 eq. 10): S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ.

    q, k: (B, H, N, Dk)   v: (B, H, N, Dv)   beta: (B, H, N) with 0 <= β_t|k_t|² <= 1 (2 with allow_neg_eigval,
    as delta_rule)   log_alpha: (B, H, N) <= 0
    returns o (B, H, N, Dv), or (o, final state) with return_state=True.
    """
    _check_qkv(q, k, v, chunk_size)
    _check_log_gate("log_alpha", log_alpha, q, per_feature=False)
    _check_beta(beta, q, k, allow_neg_eigval=allow_neg_eigval)
    _check_state(initial_state, q, v)
    return _run(q, k, v, log_alpha, beta, scale, initial_state, return_state, chunk_size)


def state_bytes(dim_k, dim_v, heads, layers=1, *, dtype=torch.float32):
    """Bytes of the recurrent state a model carries between tokens: layers · heads · Dk · Dv · itemsize,
    whatever the context length (exact attention's KV cache is 2 · layers · heads · n · D · itemsize)."""
    return layers * heads * dim_k * dim_v * torch.empty((), dtype=dtype).element_size()
