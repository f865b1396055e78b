"""Self-attention modules over minilin.gated's recurrences: retention, GLA, DeltaNet and Gated DeltaNet.

Each is MultiHeadSelfAttention's to_q/to_k/to_v/to_out around one recurrence on a (B, H, Dk, Dv) state,
with the gates computed from x (RetNet's γ is a fixed buffer):

    RetentionSelfAttention      S_t = γ_h S_{t-1} + k_t v_tᵀ                γ_h = 1 − 2^(−5−h)
    GLASelfAttention            S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ      g_t = logsigmoid(W2 W1 x_t) / 16
    DeltaNetSelfAttention       S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ    β_t = sigmoid(W_β x_t), |q|=|k|=1
    GatedDeltaNetSelfAttention  S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ   α_t = exp(−A softplus(W_α x_t + b))
    and o_t = S_tᵀ q_t / √Dk (minilin/gated.py states the equations and their papers).

Around the recurrence, the layers are built as the papers and flash-linear-attention's layers build them (fla,
github.com/fla-org/flash-linear-attention, `fla/layers/*.py`; the fla-core 0.6.0 wheel ships the kernels only), each
piece an option with fla's default:
- positions: GLA, DeltaNet and Gated DeltaNet rotate nothing; their positions come from the recurrence (its
  order and gates), and TinyLM's rotary embedding is never handed to them (`takes_rotary = False`). Retention
  keeps it: RetNet's retention rotates q and k by e^{inθ} (arXiv 2307.08621 eq. 3-5, xPos) and fla's
  MultiScaleRetention applies a RotaryEmbedding too.
- `conv_size` (DeltaNet, Gated DeltaNet: 4; retention, GLA: 0 = off, as fla's use_short_conv): a short causal
  depthwise convolution with SiLU on each of q, k, v after its projection (`ShortConv`, fla's ShortConvolution).
  The delta layers apply SiLU to q, k, v without it too, and then L2-normalise q and k (fla's qk_activation="silu",
  qk_norm="l2").
- the output: RMSNorm per head (fla's o_norm / g_norm, always on), times SiLU(W_g x) when `output_gate` (retention,
  GLA, Gated DeltaNet: on; DeltaNet: off, fla's use_gate=False); fla's FusedRMSNormGated.
Left out: fla's expand_k / expand_v (key and value heads here are dim_head wide) and grouped heads.
The gates come from x, not from q, k, v: `forward` computes them (`gates(x)`) and hands them to
`mix(q, k, v, gates=...)`, which is the recurrence alone.

Causal only: a recurrence reads the tokens in order, so `causal` defaults to True and causal=False raises a
ValueError. Padding (mask (B, N) bool, True = real token): a padded token is made a no-op, k = v = 0, log-decay 0
and β = 0, so the state passes it unchanged, and the short convolutions read the real tokens only: the outputs at
real positions are those of the sequence without its pads (exactly so in exact arithmetic; in floating point up to
the round-off of where the chunks fall). `step(x_t, state)` decodes with gated.step, token by token, from a
`GatedState` (the matrix, a position and the convolutions' last inputs).

Also here: the benchmark's builders (`Variant.bench` of the four registry entries), fn(q, k, v) with fixed gates.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from minilin import gated
from minilin.attention import MultiHeadSelfAttention, check_mask
from minilin.variants import VARIANTS

CAUSAL_ONLY = ("{name} is causal by construction (a recurrence: the state at token t holds tokens ≤ t only), so it "
               "has no bidirectional form; call it with causal=True (the default), or for a bidirectional model use "
               + ", ".join(n for n, v in VARIANTS.items() if v.bidirectional))


def _compute_dtype(t):
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


@dataclass
class GatedState:
    """The recurrent state of one layer between decoding calls: S (B, H, Dk, Dv) (float32 for half inputs) and
    position, the number of tokens consumed (the rotary offset of the next one), and conv: the short
    convolutions' last conv_size − 1 inputs of q, k and v ((B, conv_size − 1, H·Dh) each), or None without them."""
    S: torch.Tensor
    position: int = 0
    conv: tuple | None = None


class ShortConv(nn.Module):
    """A short causal depthwise convolution with SiLU (fla's ShortConvolution, activation="silu"; H3 / Mamba's conv):
        y_t = SiLU(Σ_{j=0}^{K−1} w_{K−1−j} ⊙ x_{t−j}),  x_s = 0 for s < 0 (or the cached inputs).

    x (B, N, C) -> (y (B, N, C), cache (B, K−1, C)); `cache` holds the K−1 inputs before x (decoding). Weight
    (C, 1, K) as nn.Conv1d's, initialised as it is; no bias (fla's conv_bias=False). `mask` (B, N) bool: the real
    tokens are convolved as one sequence without the pads (pads never reach a real token).
    """

    def __init__(self, channels, kernel_size=4):
        super().__init__()
        if not isinstance(kernel_size, int) or isinstance(kernel_size, bool) or kernel_size < 2:
            raise ValueError(f"conv_size must be an int >= 2 (0 turns the short convolution off), got {kernel_size!r}")
        self.kernel_size = kernel_size
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel_size))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # nn.Conv1d's default

    def forward(self, x, cache=None, mask=None):
        B, N, C = x.shape
        if mask is not None:  # the real tokens first, in order, then the pads (zeroed): convolve, put back
            order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices  # (B, N)
            idx = order[..., None].expand(B, N, C)
            packed = x.gather(1, idx).masked_fill(~mask.gather(1, order)[..., None], 0.0)
            y, cache = self(packed, cache)
            return torch.empty_like(y).scatter(1, idx, y), cache
        past = x.new_zeros(B, self.kernel_size - 1, C) if cache is None else cache.to(x.dtype)
        xp = torch.cat([past, x], dim=1)  # (B, K − 1 + N, C)
        y = (F.conv1d(xp.transpose(1, 2), self.weight, groups=C).transpose(1, 2) if N else x)  # (B, N, C)
        return F.silu(y), xp[:, xp.shape[1] - (self.kernel_size - 1):]


class _GatedSelfAttention(MultiHeadSelfAttention):
    """What the four modules share: the short convolutions, causal-only forward, padding as no-op tokens, the output
    norm and gate, and `step`.

    A subclass defines `gates(x)` -> {name: tensor} in its pure function's argument names (heads layout,
    (B, H, N) or (B, H, N, Dk)) and `recurrence(q, k, v, **gates)`, the gated.py call. `step_gates` turns
    gates into gated.step's (log_decay, beta) per token.
    """
    recurrent = True
    takes_rotary = False   # positions come from the recurrence (retention overrides: RetNet's xPos rotation)
    qkv_silu = False       # SiLU on q, k, v without the short convolution (the delta layers, as fla's)
    unit_qk = False        # L2-normalise q and k (the delta layers)

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, chunk_size=64, conv_size=0,
                 output_gate=True):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias)
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self.chunk_size = chunk_size
        inner = heads * self.dim_head
        self.convs = nn.ModuleList(ShortConv(inner, conv_size) for _ in "qkv") if conv_size else None
        self.out_norm = nn.RMSNorm(self.dim_head, eps=1e-5)  # per head, weight shared by the heads (fla's)
        self.to_out_gate = nn.Linear(dim, inner, bias=False) if output_gate else None

    @property
    def rotary(self):
        return self.__dict__.get("_rotary")

    @rotary.setter
    def rotary(self, value):
        if value is not None and not self.takes_rotary:
            raise ValueError(f"{type(self).__name__} takes no rotary embedding: its positions come from the "
                             "recurrence (neither its paper nor fla's layer rotates q and k); TinyLM hands RoPE "
                             "only to the layers with takes_rotary = True")
        self.__dict__["_rotary"] = value

    def split_gate(self, t):
        """(B, N, H) -> (B, H, N): one gate per head and token."""
        return t.transpose(1, 2)

    def gates(self, x):
        return {}

    def step_gates(self, gates):
        """gates -> (log_decay (B, H, N[, Dk]) or None, beta (B, H, N) or None), in gated.step's terms."""
        raise NotImplementedError

    def _project(self, x, mask=None, cache=None):
        """x (B, N, dim) -> (q, k, v (B, H, N, Dh) as the recurrence reads them, the convolutions' new cache)."""
        qkv = [f(x) for f in (self.to_q, self.to_k, self.to_v)]  # (B, N, H·Dh) each
        new_cache = None
        if self.convs is not None:
            qkv, new_cache = zip(*(conv(t, None if cache is None else c, mask)
                                   for conv, t, c in zip(self.convs, qkv, cache or (None,) * 3)))
        elif self.qkv_silu:
            qkv = [F.silu(t) for t in qkv]
        q, k, v = (self.split_heads(t) for t in qkv)
        if self.unit_qk:  # then I − β k kᵀ has norm <= 1 for β in [0, 2]
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        return q, k, v, (None if new_cache is None else tuple(new_cache))

    def project(self, x, mask=None):
        """x (B, N, dim) -> q, k, v (B, H, N, Dh) after the projections, short convolutions and feature map."""
        return self._project(x, mask)[:3]

    def finish(self, out, x):
        """The recurrence's output (B, H, N, Dh) -> (B, N, dim): RMSNorm per head, the SiLU gate, to_out."""
        out = self.out_norm(out)
        if self.to_out_gate is not None:
            out = out * F.silu(self.split_heads(self.to_out_gate(x)))
        return self.dropout(self.to_out(self.merge_heads(out)))

    def mix(self, q, k, v, *, mask=None, causal=True, gates=None):
        """The recurrence on given q, k, v (B, H, N, Dh) and gates (this module's `gates(x)`; retention's may be
        left out, its γ is a buffer) -> (B, H, N, Dh). Padded positions (mask False) become no-ops."""
        if not causal:
            raise ValueError(CAUSAL_ONLY.format(name=type(self).__name__))
        gates = {} if gates is None else dict(gates)
        missing = set(self.gates_needed) - set(gates)
        if missing:
            raise ValueError(f"{type(self).__name__}.mix needs its gates {sorted(missing)}, computed from x: call "
                             f"forward(x), or mix(q, k, v, gates=module.gates(x))")
        if mask is not None:
            check_mask(mask, batch=k.shape[0], length=k.shape[2])
            pad = ~mask[:, None, :]  # (B, 1, N)
            k, v = k.masked_fill(pad[..., None], 0.0), v.masked_fill(pad[..., None], 0.0)  # NaN padding too
            gates = {name: g.masked_fill(pad[..., None] if g.ndim == 4 else pad, 0.0) for name, g in gates.items()}
        return self.recurrence(q, k, v, masked=mask is not None, **gates)

    def forward(self, x, *, mask=None, causal=True):
        self.check_input(x)
        if not causal:
            raise ValueError(CAUSAL_ONLY.format(name=type(self).__name__))
        if mask is not None:
            check_mask(mask, batch=x.shape[0], length=x.shape[1])
        q, k, v, _ = self._project(x, mask)  # (B, H, N, Dh)
        if self.rotary is not None:
            q, k = self.rotary(q, k, 0)
        return self.finish(self.mix(q, k, v, mask=mask, causal=True, gates=self.gates(x)), x)

    def step(self, x_t, state=None):
        """Causal decoding of the next token(s) x_t (B, T, dim) with a (B, H, Dk, Dv) state: (y_t, GatedState).

        gated.step once per token (q scaled by Dk^-1/2 as the chunked functions do); the short convolutions
        continue from the state's cache; retention applies self.rotary(q, k, position) when set. Equals
        forward(x, causal=True) position by position.
        """
        self.check_input(x_t, "x_t")
        q, k, v, conv = self._project(x_t, None, None if state is None else state.conv)  # (B, H, T, Dh)
        position = 0 if state is None else state.position
        if self.rotary is not None:
            q, k = self.rotary(q, k, position)
        log_decay, beta = self.step_gates(self.gates(x_t))
        dtype = _compute_dtype(q)
        B, H, T, Dk = q.shape
        S = q.new_zeros(B, H, Dk, v.shape[-1], dtype=dtype) if state is None else state.S
        q, k, v = q.to(dtype) * Dk ** -0.5, k.to(dtype), v.to(dtype)
        outs = []
        for t in range(T):
            o, S = gated.step(q[:, :, t], k[:, :, t], v[:, :, t], S,
                              log_decay_t=None if log_decay is None else log_decay[:, :, t].to(dtype),
                              beta_t=None if beta is None else beta[:, :, t].to(dtype))
            outs.append(o)  # (B, H, Dv)
        out = torch.stack(outs, dim=2) if outs else v.new_zeros(B, H, 0, v.shape[-1])  # (B, H, T, Dv)
        return self.finish(out.to(x_t.dtype), x_t), GatedState(S, position + T, conv)


class RetentionSelfAttention(_GatedSelfAttention):
    """Multi-head retention (RetNet, arXiv 2307.08621 eq. 1-4, §2.2): S_t = γ_h S_{t-1} + k_t v_tᵀ, o_t = S_tᵀq_t/√Dk.

    x (B, N, dim) -> (B, N, dim). Buffer `gamma` (H,): γ_h = 1 − 2^(−5−h) (gated.retention_gammas), fixed; it is
    not saved in the state_dict (a function of `heads`). Through gated.retention; with a mask through gated.gla
    with the per-token decay log γ_h at real tokens and 0 at pads (no-ops). It takes the model's rotary embedding
    (RetNet's Θ_n = e^{inθ}, eq. 3-5, rotates q and k; fla's MultiScaleRetention too). Options as fla's layer:
    conv_size=0 (no short convolution), output_gate=True (RetNet's swish gate, fla's RMSNorm gated by SiLU).
    """
    gates_needed = ("log_gate",)
    takes_rotary = True

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, chunk_size=64, conv_size=0,
                 output_gate=True):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias, chunk_size=chunk_size,
                         conv_size=conv_size, output_gate=output_gate)
        self.register_buffer("gamma", gated.retention_gammas(heads).float(), persistent=False)

    def _log_decay(self, t):
        """log γ_h for every token of t (B, N, ...) or (B, H, N, ...): (B, H, N), as gated.retention computes it."""
        B, N = t.shape[0], t.shape[-2]
        log_gamma = torch.log(self.gamma.to(_compute_dtype(t)))
        return log_gamma.view(1, self.heads, 1).expand(B, self.heads, N)

    def gates(self, x):
        return {"log_gate": self._log_decay(x)}  # (B, H, N)

    def mix(self, q, k, v, *, mask=None, causal=True, gates=None):
        # γ is a buffer: retention needs nothing from x, so mix(q, k, v) works without gates too
        return super().mix(q, k, v, mask=mask, causal=causal, gates={"log_gate": self._log_decay(q)}
                           if gates is None else gates)

    def step_gates(self, gates):
        return gates["log_gate"], None

    def recurrence(self, q, k, v, *, masked, log_gate):
        if not masked:
            return gated.retention(q, k, v, self.gamma, chunk_size=self.chunk_size)
        return gated.gla(q, k, v, log_gate, chunk_size=self.chunk_size)  # γ per token: 0 (keep) at the pads


class GLASelfAttention(_GatedSelfAttention):
    """Gated linear attention (GLA, arXiv 2312.06635 eq. 3 and §4.4): S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ.

    x (B, N, dim) -> (B, N, dim). g_t = logsigmoid(W2 W1 x_t) / gate_logit_normalizer, (B, H, N, Dh) ≤ 0: a decay
    per head and key feature through a rank-`gate_low_rank_dim` projection `to_gate` (dim -> 16 -> H·Dh), divided
    by the paper's temperature 16 so that gates start near 1 (fla's GatedLinearAttention has the same). No rotary
    embedding; options as fla's layer: conv_size=0, output_gate=True (GLA §4.4's swish output gate after a norm).
    """
    gates_needed = ("log_gate",)

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, chunk_size=64, gate_low_rank_dim=16,
                 gate_logit_normalizer=16.0, conv_size=0, output_gate=True):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias, chunk_size=chunk_size,
                         conv_size=conv_size, output_gate=output_gate)
        if not gate_logit_normalizer > 0:
            raise ValueError(f"gate_logit_normalizer must be > 0 (it divides the log-gate), got "
                             f"{gate_logit_normalizer!r}")
        self.to_gate = nn.Sequential(nn.Linear(dim, gate_low_rank_dim, bias=False),
                                     nn.Linear(gate_low_rank_dim, heads * self.dim_head))
        self.gate_logit_normalizer = gate_logit_normalizer

    def gates(self, x):
        g = F.logsigmoid(self.to_gate(x)) / self.gate_logit_normalizer  # (B, N, H·Dh) ≤ 0
        return {"log_gate": self.split_heads(g)}  # (B, H, N, Dh)

    def step_gates(self, gates):
        return gates["log_gate"], None

    def recurrence(self, q, k, v, *, masked, log_gate):
        return gated.gla(q, k, v, log_gate, chunk_size=self.chunk_size)


class DeltaNetSelfAttention(_GatedSelfAttention):
    """DeltaNet (arXiv 2406.06484 eq. 2, §3.3): S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ, o_t = S_tᵀq_t/√Dk.

    x (B, N, dim) -> (B, N, dim). As fla's DeltaNet layer: q, k, v through the short convolutions with SiLU
    (conv_size=4; SiLU alone with conv_size=0), then q and k L2-normalised per head; β_t = sigmoid(to_beta(x_t))
    (B, H, N), one step size per head; the output RMSNorm-ed per head, without a gate (output_gate=False, fla's
    use_gate=False). No rotary embedding. Stability: the transition I − β k kᵀ has eigenvalues 1 and 1 − β|k|²,
    so the state cannot grow when 0 ≤ β|k|² ≤ 2; with unit keys β in [0, 1] keeps every eigenvalue in [0, 1].
    allow_neg_eigval=True doubles β (2·sigmoid, in [0, 2]) so that eigenvalues reach down to −1 (fla's
    allow_neg_eigval; Grazzi et al., "Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues",
    arXiv 2411.12537).
    """
    gates_needed = ("beta",)
    qkv_silu = True
    unit_qk = True

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, chunk_size=64, conv_size=4,
                 output_gate=False, allow_neg_eigval=False):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias, chunk_size=chunk_size,
                         conv_size=conv_size, output_gate=output_gate)
        self.to_beta = nn.Linear(dim, heads)
        self.allow_neg_eigval = bool(allow_neg_eigval)

    def gates(self, x):
        beta = torch.sigmoid(self.to_beta(x)) * (2.0 if self.allow_neg_eigval else 1.0)  # (B, N, H)
        return {"beta": self.split_gate(beta)}  # (B, H, N)

    def step_gates(self, gates):
        return None, gates["beta"]

    def recurrence(self, q, k, v, *, masked, beta):
        return gated.delta_rule(q, k, v, beta, chunk_size=self.chunk_size, allow_neg_eigval=self.allow_neg_eigval)


class GatedDeltaNetSelfAttention(DeltaNetSelfAttention):
    """Gated DeltaNet (arXiv 2412.06464 eq. 10): S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ.

    x (B, N, dim) -> (B, N, dim). DeltaNet's short convolutions, SiLU, unit q, k and β, plus a decay per head and
    token in Mamba-2's form (arXiv 2405.21060) as flash-linear-attention's GatedDeltaNet layer has it:
        log α_t = −A_h · softplus(to_alpha(x_t) + dt_bias_h) ≤ 0   (B, H, N),
    with dt_bias_h the inverse softplus of a step Δ_h drawn log-uniformly from [0.001, 0.1] (Mamba-2's dt
    init) and A_h drawn from U(0, 16), kept as its log `A_log`: U(0, 16) is fla's GatedDeltaNet default;
    Mamba-2's own is U(1, 16). As fla's layer, the output is RMSNorm-ed per head and gated by SiLU(W_g x)
    (output_gate=True, fla's FusedRMSNormGated); fla also widens values (expand_v=2, head_v = 2·head_k), which
    is left out here (Dv = Dk = dim_head). At the start of training α_t ≈ exp(−A_h Δ_h), per token: its median
    over many drawn heads is about 0.94, and about half of the heads keep more than a tenth of a write over 32
    tokens (notebook 09, section 3, measures it). A plain logsigmoid(to_alpha(x)) starts near α = 0.5 or below,
    which leaves less than 1e-3 of a write after 32 tokens in every head.
    """
    gates_needed = ("beta", "log_alpha")
    DT_RANGE = (0.001, 0.1)
    A_RANGE = (0.0, 16.0)

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, chunk_size=64, conv_size=4,
                 output_gate=True, allow_neg_eigval=False):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias, chunk_size=chunk_size,
                         conv_size=conv_size, output_gate=output_gate, allow_neg_eigval=allow_neg_eigval)
        self.to_alpha = nn.Linear(dim, heads, bias=False)
        lo, hi = (math.log(t) for t in self.DT_RANGE)
        dt = torch.exp(torch.rand(heads) * (hi - lo) + lo).clamp(min=1e-4)       # (H,) steps Δ_h
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))           # softplus(dt_bias) = Δ_h
        a = torch.empty(heads).uniform_(*self.A_RANGE).clamp(min=1e-4)           # (H,) rates A_h (log of 0: -inf)
        self.A_log = nn.Parameter(a.log())

    def log_alpha(self, x):
        """(B, N, dim) -> (B, H, N): log α_t = −exp(A_log) · softplus(to_alpha(x) + dt_bias) ≤ 0."""
        return self.split_gate(-self.A_log.exp() * F.softplus(self.to_alpha(x) + self.dt_bias))

    def gates(self, x):
        return {**super().gates(x), "log_alpha": self.log_alpha(x)}  # (B, H, N)

    def step_gates(self, gates):
        return gates["log_alpha"], gates["beta"]

    def recurrence(self, q, k, v, *, masked, beta, log_alpha):
        return gated.gated_delta_rule(q, k, v, beta, log_alpha, chunk_size=self.chunk_size,
                                      allow_neg_eigval=self.allow_neg_eigval)


# ---- the benchmark's builders (minilin.variants: Variant.bench) -------------------------------------------------

def _bench_fn(name, causal, fn):
    if not causal:
        raise ValueError(f"{name} is causal by construction: benchmark {name}-causal")

    return fn  # on device="meta" (the memory model) gated.py takes the path of in-range, finite inputs


def _per_head(g, q):
    """A gate made once for batch 1, (1, H, n[, D]), as a view over q's batch."""
    return g.expand(q.shape[0], *g.shape[1:])


def retention_fn(n, make, *, causal, heads, **_):
    gamma = gated.retention_gammas(heads).to(make.device)  # cast to q's dtype inside gated.retention
    return _bench_fn("retention", causal, lambda q, k, v: gated.retention(q, k, v, gamma))


def gla_fn(n, make, *, causal, heads, dim_head, **_):
    log_gate = F.logsigmoid(make.randn(1, heads, n, dim_head)) / 16  # GLA's temperature: gates near 1
    return _bench_fn("gla", causal, lambda q, k, v: gated.gla(q, k, v, _per_head(log_gate, q)))


def deltanet_fn(n, make, *, causal, heads, **_):
    beta = torch.sigmoid(make.randn(1, heads, n))

    def fn(q, k, v):  # unit q and k, as DeltaNetSelfAttention's; normalising is part of the cost
        return gated.delta_rule(F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, _per_head(beta, q))
    return _bench_fn("deltanet", causal, fn)


def gated_deltanet_fn(n, make, *, causal, heads, **_):
    beta, log_alpha = torch.sigmoid(make.randn(1, heads, n)), F.logsigmoid(make.randn(1, heads, n))

    def fn(q, k, v):
        return gated.gated_delta_rule(F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, _per_head(beta, q),
                                      _per_head(log_alpha, q))
    return _bench_fn("gated-deltanet", causal, fn)
