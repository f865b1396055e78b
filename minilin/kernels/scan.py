"""The chunked causal scan as Triton kernels: forward, and a backward made of two more scans.

    S_t = exp(g_t) S_{t−1} + k_t v_tᵀ,   o_t = S_tᵀ (scale · q_t)                    (minilin.gated's recurrence
                                                                                  with a scalar decay per head)
g: (B, H, N) ≤ 0 or None (no decay: linear attention). One program per (batch, head) (and block of BV value
columns in the forward) walks the chunks of BT tokens in order, holding the (Dk × Dv) state in registers in
float32: per chunk, with b_i the cumulative log decay from the chunk's start to token i,

    o_i   = exp(b_i) q̃_i S_0 + Σ_{j ≤ i in chunk} (q̃_i · k_j) exp(b_i − b_j) v_j          (forward, causal)
    S_end = exp(b_end) S_0 + Σ_j exp(b_end − b_j) k_j v_jᵀ
    dq̃_i  = exp(b_i) do_i S_0ᵀ + Σ_{j ≤ i} (do_i · v_j) exp(b_i − b_j) k_j     (a causal scan of Σ k vᵀ)
    dk_j, dv_j: an anti-causal scan of G = Σ_{i ≥ j} exp(B_i − B_j) q̃_i do_iᵀ, walked from the last chunk:
    dk_j = G_j v_j,  dv_j = G_jᵀ k_j                                             (the in-chunk part as matrices)
    dg   = reverse cumsum over tokens of (q · dq − k · dk)   (each factor exp(B_i − B_j) is +1 on B_i, −1 on B_j)

Every exponent is ≤ 0 (b_i − b_j with j ≤ i, b_end − b_j, b_i), so nothing overflows. Matrix products take the
input dtype (bfloat16 on a GPU) with float32 accumulation; float32 inputs use IEEE products (no TF32) so the
tests can ask for 1e-5. The structure follows flash-linear-attention's `fused_chunk` kernels
(fla/ops/common/fused_chunk.py, fla-core 0.5: one program per head walking the chunks, the state in registers,
`exp(b_end − b_j)` applied to the keys before the state update); the code is written here, with one program per
(batch, head) in the backward and the decay's cumulative sums computed in PyTorch.

On a CUDA device the kernels are compiled; on the CPU they run in Triton's interpreter (numpy, for tests at
small sizes: correct, never fast).
"""
import functools
import importlib.util
import os
import sys

import torch

from minilin.gated import _check_log_gate, _check_qkv, _check_state, _compute_dtype, _floor, retention_gammas
from minilin.gated_attention import RetentionSelfAttention
from minilin.linear import LinearSelfAttention, _divide, _with_ones, elu_plus_one


def require_triton():
    """The triton module, or an ImportError naming the fix."""
    try:
        import triton  # noqa: F401
    except ImportError as e:
        raise ImportError("minilin.kernels needs triton: pip install triton (it ships with torch's CUDA wheels on "
                          "Linux; on a CPU the kernels run in its interpreter, for tests only)") from e
    return triton


def interpreting():
    """True when triton was imported with TRITON_INTERPRET=1 (its language's helpers are then interpreted too)."""
    triton = require_triton()
    from triton.runtime.interpreter import InterpretedFunction
    import triton.language as tl
    return isinstance(tl.zeros, InterpretedFunction) and triton is not None


def kernel_runs(t):
    """Whether the Triton scan can run on tensors like t: CUDA with triton installed (float32, float16,
    bfloat16), or the CPU in Triton's interpreter (TRITON_INTERPRET=1 set before triton was imported)."""
    if t.dtype not in (torch.float32, torch.float16, torch.bfloat16) or t.device.type not in ("cuda", "cpu"):
        return False
    if t.device.type == "cpu" and "triton" not in sys.modules:  # (no import of triton just to ask)
        return os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None
    try:
        require_triton()
    except ImportError:
        return False
    return t.device.type == "cuda" or interpreting()


@functools.lru_cache(maxsize=None)
def _kernels(interpret):
    """The three kernels, compiled for the GPU or wrapped in Triton's interpreter (CPU tensors)."""
    triton = require_triton()
    import triton.language as tl

    def fwd(q, k, v, b, h0, o, ht, scale, N, NP, NT,
            K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
            DECAY: tl.constexpr, INITIAL: tl.constexpr, FINAL: tl.constexpr, PRECISION: tl.constexpr):
        i_v, i_bh = tl.program_id(0), tl.program_id(1)
        o_k = tl.arange(0, BK)
        o_v = i_v * BV + tl.arange(0, BV)
        o_c = tl.arange(0, BT)
        m_k, m_v = o_k < K, o_v < V
        causal = o_c[:, None] >= o_c[None, :]
        q += i_bh * N * K
        k += i_bh * N * K
        v += i_bh * N * V
        o += i_bh * N * V
        h = tl.zeros([BK, BV], dtype=tl.float32)  # the state S, (Dk × BV)
        if INITIAL:
            h = tl.load(h0 + i_bh * K * V + o_k[:, None] * V + o_v[None, :], mask=m_k[:, None] & m_v[None, :],
                        other=0.0).to(tl.float32)
        for i_t in range(0, NT):
            o_t = i_t * BT + o_c
            m_t = o_t < N
            b_q = tl.load(q + o_t[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
            b_q = (b_q * scale).to(b_q.dtype)
            b_kt = tl.load(k + o_t[None, :] * K + o_k[:, None], mask=m_k[:, None] & m_t[None, :], other=0.0)
            b_v = tl.load(v + o_t[:, None] * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
            s = tl.dot(b_q, b_kt, input_precision=PRECISION)  # (BT, BT) q̃_i · k_j
            read = tl.dot(b_q, h.to(b_q.dtype), input_precision=PRECISION)  # (BT, BV) q̃_i S_0
            if DECAY:  # b: padded to whole chunks by repeating each chunk's end, so every exponent is ≤ 0
                b_b = tl.load(b + i_bh * NP + o_t)
                b_end = tl.load(b + i_bh * NP + i_t * BT + BT - 1)
                s = s * tl.exp(tl.where(causal, b_b[:, None] - b_b[None, :], float("-inf")))
                read = read * tl.exp(b_b)[:, None]
                b_kt = (b_kt * tl.exp(b_end - b_b)[None, :]).to(b_kt.dtype)
                h = h * tl.exp(b_end)
            else:
                s = tl.where(causal, s, 0.0)
            b_o = tl.dot(s.to(b_v.dtype), b_v, input_precision=PRECISION) + read
            h = tl.dot(b_kt, b_v, h, input_precision=PRECISION)  # S += Σ_j k_j v_jᵀ (accumulated in float32)
            tl.store(o + o_t[:, None] * V + o_v[None, :], b_o.to(o.dtype.element_ty),
                     mask=m_t[:, None] & m_v[None, :])
        if FINAL:
            tl.store(ht + i_bh * K * V + o_k[:, None] * V + o_v[None, :], h, mask=m_k[:, None] & m_v[None, :])

    def bwd_dq(k, v, b, h0, do, dq, scale, N, NP, NT,
               K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
               DECAY: tl.constexpr, INITIAL: tl.constexpr, PRECISION: tl.constexpr):
        """dq: the causal scan of Σ_j v_j k_jᵀ read by do (the forward with q → do, k → v, v → k)."""
        i_bh = tl.program_id(0)
        o_k, o_v, o_c = tl.arange(0, BK), tl.arange(0, BV), tl.arange(0, BT)
        m_k, m_v = o_k < K, o_v < V
        causal = o_c[:, None] >= o_c[None, :]
        k += i_bh * N * K
        dq += i_bh * N * K
        v += i_bh * N * V
        do += i_bh * N * V
        h = tl.zeros([BV, BK], dtype=tl.float32)  # Sᵀ
        if INITIAL:
            h = tl.load(h0 + i_bh * K * V + o_v[:, None] + o_k[None, :] * V, mask=m_v[:, None] & m_k[None, :],
                        other=0.0).to(tl.float32)
        for i_t in range(0, NT):
            o_t = i_t * BT + o_c
            m_t = o_t < N
            b_do = tl.load(do + o_t[:, None] * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
            b_vt = tl.load(v + o_t[None, :] * V + o_v[:, None], mask=m_v[:, None] & m_t[None, :], other=0.0)
            b_k = tl.load(k + o_t[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
            ds = tl.dot(b_do, b_vt, input_precision=PRECISION)  # (BT, BT) do_i · v_j
            read = tl.dot(b_do, h.to(b_do.dtype), input_precision=PRECISION)  # (BT, BK)
            if DECAY:
                b_b = tl.load(b + i_bh * NP + o_t)
                b_end = tl.load(b + i_bh * NP + i_t * BT + BT - 1)
                ds = ds * tl.exp(tl.where(causal, b_b[:, None] - b_b[None, :], float("-inf")))
                read = read * tl.exp(b_b)[:, None]
                b_vt = (b_vt * tl.exp(b_end - b_b)[None, :]).to(b_vt.dtype)
                h = h * tl.exp(b_end)
            else:
                ds = tl.where(causal, ds, 0.0)
            b_dq = (tl.dot(ds.to(b_k.dtype), b_k, input_precision=PRECISION) + read) * scale
            h = tl.dot(b_vt, b_k, h, input_precision=PRECISION)
            tl.store(dq + o_t[:, None] * K + o_k[None, :], b_dq.to(dq.dtype.element_ty),
                     mask=m_t[:, None] & m_k[None, :])

    def bwd_dkdv(q, k, v, b, do, dht, dk, dv, dh0, scale, N, NP, NT,
                 K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                 DECAY: tl.constexpr, FINAL: tl.constexpr, INITIAL: tl.constexpr, PRECISION: tl.constexpr):
        """dk, dv: the anti-causal scan of G = Σ_{i ≥ j} exp(B_i − B_j) q̃_i do_iᵀ, from the last chunk."""
        i_bh = tl.program_id(0)
        o_k, o_v, o_c = tl.arange(0, BK), tl.arange(0, BV), tl.arange(0, BT)
        m_k, m_v = o_k < K, o_v < V
        causal = o_c[:, None] >= o_c[None, :]
        q += i_bh * N * K
        k += i_bh * N * K
        dk += i_bh * N * K
        v += i_bh * N * V
        do += i_bh * N * V
        dv += i_bh * N * V
        g = tl.zeros([BK, BV], dtype=tl.float32)  # G after the current chunk (the final state's gradient first)
        if FINAL:
            g = tl.load(dht + i_bh * K * V + o_k[:, None] * V + o_v[None, :], mask=m_k[:, None] & m_v[None, :],
                        other=0.0).to(tl.float32)
        for i_r in range(0, NT):
            i_t = NT - 1 - i_r
            o_t = i_t * BT + o_c
            m_t = o_t < N
            b_q = tl.load(q + o_t[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
            b_q = (b_q * scale).to(b_q.dtype)
            b_k = tl.load(k + o_t[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
            b_v = tl.load(v + o_t[:, None] * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
            b_do = tl.load(do + o_t[:, None] * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
            a = tl.dot(b_q, tl.trans(b_k), input_precision=PRECISION)  # (BT, BT) q̃_i · k_j
            ds = tl.dot(b_do, tl.trans(b_v), input_precision=PRECISION)  # (BT, BT) do_i · v_j
            from_later_k = tl.dot(b_v, tl.trans(g).to(b_v.dtype), input_precision=PRECISION)  # (BT, BK) G v_j
            from_later_v = tl.dot(b_k, g.to(b_k.dtype), input_precision=PRECISION)  # (BT, BV) Gᵀ k_j
            if DECAY:
                b_b = tl.load(b + i_bh * NP + o_t)
                b_end = tl.load(b + i_bh * NP + i_t * BT + BT - 1)
                pair = tl.exp(tl.where(causal, b_b[:, None] - b_b[None, :], float("-inf")))
                a, ds = a * pair, ds * pair
                later = tl.exp(b_end - b_b)[:, None]
                from_later_k, from_later_v = from_later_k * later, from_later_v * later
                g = g * tl.exp(b_end)
                b_qg = (b_q * tl.exp(b_b)[:, None]).to(b_q.dtype)
            else:
                a, ds = tl.where(causal, a, 0.0), tl.where(causal, ds, 0.0)
                b_qg = b_q
            b_dk = tl.dot(tl.trans(ds).to(b_q.dtype), b_q, input_precision=PRECISION) + from_later_k
            b_dv = tl.dot(tl.trans(a).to(b_do.dtype), b_do, input_precision=PRECISION) + from_later_v
            g = tl.dot(tl.trans(b_qg), b_do, g, input_precision=PRECISION)
            tl.store(dk + o_t[:, None] * K + o_k[None, :], b_dk.to(dk.dtype.element_ty),
                     mask=m_t[:, None] & m_k[None, :])
            tl.store(dv + o_t[:, None] * V + o_v[None, :], b_dv.to(dv.dtype.element_ty),
                     mask=m_t[:, None] & m_v[None, :])
        if INITIAL:
            tl.store(dh0 + i_bh * K * V + o_k[:, None] * V + o_v[None, :], g, mask=m_k[:, None] & m_v[None, :])

    if interpret:
        from triton.runtime.interpreter import InterpretedFunction
        return tuple(InterpretedFunction(f) for f in (fwd, bwd_dq, bwd_dkdv))
    return tuple(triton.jit(f) for f in (fwd, bwd_dq, bwd_dkdv))


def _block(n):
    return max(16, 1 << (n - 1).bit_length())  # tl.dot needs every dimension ≥ 16 and a power of two


def _launch_args(q, v, chunk_size):
    B, H, N, K = q.shape
    V = v.shape[-1]
    NT = -(-N // chunk_size)
    return dict(N=N, NP=NT * chunk_size, NT=NT, K=K, V=V, BT=chunk_size, BK=_block(K),
                PRECISION="ieee" if q.dtype == torch.float32 else "tf32")


class _ChunkScan(torch.autograd.Function):
    """o = the scan of (q, k, v) with chunk-local cumulative log decays b (B, H, NP) or None; autograd through
    the two backward scans."""

    @staticmethod
    def forward(ctx, q, k, v, g, b, scale, initial_state, return_state, chunk_size):
        B, H, N, K = q.shape
        V = v.shape[-1]
        interpret = q.device.type == "cpu"
        ctx.scale, ctx.chunk_size, ctx.interpret = scale, chunk_size, interpret
        if q.device.type == "meta":  # the benchmark's model: the kernel's four products per chunk as batched
            ctx.save_for_backward(q, k, v, g, b, initial_state, None)  # matmuls (its FLOPs; the temporaries
            NT = -(-N // chunk_size)  # overstate the kernel's memory, which keeps one chunk in registers)
            qc, kc = q.new_empty(B, H, NT, chunk_size, K), k.new_empty(B, H, NT, chunk_size, K)
            vc = v.new_empty(B, H, NT, chunk_size, V)
            states = kc.transpose(-2, -1) @ vc  # (B, H, NT, K, V)
            out = (qc @ kc.transpose(-2, -1)) @ vc + qc @ states
            o = out.reshape(B, H, NT * chunk_size, V)[:, :, :N].clone()
            return o, (q.new_empty(B, H, K, V, dtype=torch.float32) if return_state else None)
        fwd, _, _ = _kernels(interpret)
        args = _launch_args(q, v, chunk_size)
        BV = min(_block(V), 64)
        o = torch.empty_like(v)
        ht = q.new_empty(B, H, K, V, dtype=torch.float32) if return_state else None
        h0 = None if initial_state is None else initial_state.contiguous()
        fwd[(triton_cdiv(V, BV), B * H)](q, k, v, b, h0, o, ht, scale, BV=BV, DECAY=b is not None,
                                        INITIAL=h0 is not None, FINAL=return_state, **args)
        ctx.save_for_backward(q, k, v, g, b, h0, ht)
        return (o, ht) if return_state else (o, None)

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, b, h0, ht = ctx.saved_tensors
        if q.device.type == "meta":  # the backward's products: bwd_dq's four, bwd_dkdv's seven (qc: q or k,
            NT = -(-q.shape[2] // ctx.chunk_size)  # vc: v or do; G: a (K, V) state)
            qc = q.new_empty(*q.shape[:2], NT, ctx.chunk_size, q.shape[-1])
            vc = v.new_empty(*v.shape[:2], NT, ctx.chunk_size, v.shape[-1])
            G = qc.transpose(-2, -1) @ vc  # bwd_dq's state update k vᵀ
            (vc @ vc.transpose(-2, -1)) @ qc + vc @ G.transpose(-2, -1)  # dq: do vᵀ, times k; do Gᵀ
            a, ds = qc @ qc.transpose(-2, -1), vc @ vc.transpose(-2, -1)  # bwd_dkdv: q kᵀ, do vᵀ
            ds.transpose(-2, -1) @ qc + vc @ G.transpose(-2, -1)  # dk: dsᵀ q + v Gᵀ
            a.transpose(-2, -1) @ vc + qc @ G  # dv: aᵀ do + k G
            qc.transpose(-2, -1) @ vc  # the carried state's update qᵀ do
            return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
                    None if g is None else torch.empty_like(g), None, None,
                    None if h0 is None else torch.empty_like(h0), None, None)
        B, H, N, K = q.shape
        V = v.shape[-1]
        _, bwd_dq, bwd_dkdv = _kernels(ctx.interpret)
        args = _launch_args(q, v, ctx.chunk_size)
        args["BV"] = _block(V)
        do = do.contiguous()
        dht = None if dht is None else dht.float().contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dh0 = None if h0 is None else torch.empty(B, H, K, V, dtype=torch.float32, device=q.device)
        decay = b is not None
        bwd_dq[(B * H,)](k, v, b, h0, do, dq, ctx.scale, DECAY=decay, INITIAL=h0 is not None, **args)
        bwd_dkdv[(B * H,)](q, k, v, b, do, dht, dk, dv, dh0, ctx.scale, DECAY=decay, FINAL=dht is not None,
                           INITIAL=h0 is not None, **args)
        dg = None
        if g is not None and ctx.needs_input_grad[3]:
            # ∂L/∂B_m = q_m·dq_m − k_m·dk_m (+ ⟨S_N, dS_N⟩ at the last token); g_t enters every B_m, m ≥ t
            d_cum = (q.float() * dq.float()).sum(-1) - (k.float() * dk.float()).sum(-1)  # (B, H, N)
            if dht is not None:
                d_cum[..., -1] += (ht * dht).sum((-2, -1))
            dg = d_cum.flip(-1).cumsum(-1).flip(-1).to(g.dtype)
        return dq, dk, dv, dg, None, None, dh0, None, None


def _pow2(chunk_size):
    """The Triton block nearest below chunk_size (a power of two, at least 16)."""
    return max(16, 1 << (max(chunk_size, 1).bit_length() - 1))


def triton_cdiv(a, b):
    return -(-a // b)


def _check_chunk(chunk_size):
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 16 or \
            chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a power of two >= 16 (a Triton block: tl.dot needs it), got "
                         f"{chunk_size!r}; 64 is a good default")


def chunk_scan(q, k, v, log_decay=None, *, scale=None, initial_state=None, return_state=False, chunk_size=64):
    """The chunked causal scan in Triton: S_t = exp(g_t) S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ (scale · q_t).

    q, k: (B, H, N, Dk)   v: (B, H, N, Dv)   log_decay g: (B, H, N) ≤ 0 (one decay per head and token:
    retention's log γ, a Mamba-2 gate) or None (no decay)   scale: None = Dk^-1/2
    initial_state: (B, H, Dk, Dv) or None   chunk_size: tokens per program step, a power of two ≥ 16.
    returns o (B, H, N, Dv) in q's dtype, or (o, final state (B, H, Dk, Dv) in float32) with return_state=True:
    the same as minilin.gated (gla with a (B, H, N) gate, retention, or the undecayed recurrence). Autograd
    runs the two backward scans (module docstring); gradients reach q, k, v, log_decay and initial_state.
    CUDA tensors run the compiled kernels; CPU tensors Triton's interpreter (small sizes only).
    """
    _check_qkv(q, k, v, chunk_size)
    _check_chunk(chunk_size)
    _check_state(initial_state, q, v)
    if log_decay is not None:
        _check_log_gate("log_decay", log_decay, q, per_feature=False)
    if q.device.type not in ("cuda", "cpu", "meta"):
        raise ValueError(f"the Triton kernels run on CUDA (compiled) or the CPU (interpreted), got {q.device}")
    B, H, N, Dk = q.shape
    Dv = v.shape[-1]
    if Dk > 256 or Dv > 256:
        raise ValueError(f"head dims up to 256 fit one program's state, got Dk={Dk}, Dv={Dv}; split the heads")
    if q.device.type == "cpu" and not interpreting():
        raise RuntimeError("on the CPU the Triton kernels run in Triton's interpreter: set TRITON_INTERPRET=1 "
                           "before triton is first imported (e.g. TRITON_INTERPRET=1 python ...), or move the "
                           "tensors to a CUDA device")
    scale = Dk ** -0.5 if scale is None else float(scale)
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"the Triton scan takes float32, float16 or bfloat16 (tl.dot), got {q.dtype}; "
                         "use minilin.gated for float64")
    dtype = q.dtype
    q, k, v = q.contiguous(), k.to(dtype).contiguous(), v.to(dtype).contiguous()
    if initial_state is not None:
        initial_state = initial_state.to(torch.float32)
    if N == 0:
        o = v.new_zeros(B, H, 0, Dv)
        state = q.new_zeros(B, H, Dk, Dv, dtype=torch.float32) if initial_state is None else initial_state
        return (o, state) if return_state else o
    g, b = None, None
    if log_decay is not None:
        g = log_decay.to(torch.float32)
        NT = -(-N // chunk_size)
        padded = torch.nn.functional.pad(g.clamp(min=_floor(g.dtype)), (0, NT * chunk_size - N))  # pads: g = 0
        b = padded.view(B, H, NT, chunk_size).cumsum(-1).reshape(B, H, NT * chunk_size).detach().contiguous()
    o, state = _ChunkScan.apply(q, k, v, g, b, scale, initial_state, return_state, chunk_size)
    return (o, state) if return_state else o


def linear_attention_causal(phi_q, phi_k, v, *, chunk_size=64):
    """Causal linear attention on given (non-negative) features, normalised: φ(q_i)·Σ_{j≤i} φ(k_j) v_jᵀ divided by
    φ(q_i)·Σ_{j≤i} φ(k_j) (minilin.linear.causal_linear_attention), as one scan of [v | 1].

    phi_q, phi_k: (B, H, N, F)   v: (B, H, N, Dv)  ->  (B, H, N, Dv)
    """
    o = chunk_scan(phi_q, phi_k, _with_ones(v), scale=1.0, chunk_size=chunk_size)
    return _divide(o)


def retention(q, k, v, gamma, *, scale=None, initial_state=None, return_state=False, chunk_size=64):
    """minilin.gated.retention through the Triton scan: gamma (H,) in (0, 1] (a float: every head)."""
    from minilin.gated import _retention_log_decay
    _check_qkv(q, k, v, chunk_size)
    return chunk_scan(q, k, v, _retention_log_decay(gamma, q), scale=scale, initial_state=initial_state,
                      return_state=return_state, chunk_size=chunk_size)


# ---- modules (the registry's triton-linear and triton-retention) -------------------------------------------------

class TritonLinearSelfAttention(LinearSelfAttention):
    """LinearSelfAttention (elu(x)+1 features) whose causal, unpadded mixing step is the Triton scan. Same
    parameters as `linear` (weights move between the two with load_state_dict). Where the kernel cannot run
    (`kernel_runs`: a CPU without TRITON_INTERPRET=1, float64) and with a mask, the PyTorch form computes the
    same function; `used_kernel` counts the calls that went through Triton."""
    used_kernel = 0

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, chunk_size=64):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias, chunk_size=chunk_size)

    def forward(self, x, *, mask=None, causal=True):  # causal by default, as the gated modules
        return super().forward(x, mask=mask, causal=causal)

    def mix(self, q, k, v, *, mask=None, causal=True):
        if not causal:
            raise ValueError("triton-linear is causal by construction (its kernel is the causal scan); for the "
                             "non-causal form use attention 'linear'")
        if mask is not None or not kernel_runs(q) or q.shape[2] != k.shape[2]:
            return super().mix(q, k, v, mask=mask, causal=causal)
        type(self).used_kernel += 1
        dtype = _compute_dtype(q) if q.device.type == "cpu" else q.dtype  # the interpreter: float32
        out = linear_attention_causal(elu_plus_one.query(q.to(dtype)), elu_plus_one.key(k.to(dtype)), v.to(dtype),
                                      chunk_size=_pow2(self.chunk_size))
        return out.to(q.dtype)


class TritonRetentionSelfAttention(RetentionSelfAttention):
    """RetentionSelfAttention whose unpadded scan is the Triton kernel; with a mask, or where the kernel cannot
    run (`kernel_runs`), minilin.gated computes the same function. `used_kernel` counts the Triton calls."""
    used_kernel = 0

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, chunk_size=64):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias, chunk_size=chunk_size)

    def recurrence(self, q, k, v, *, masked, log_gate):
        if masked or not kernel_runs(q):
            return super().recurrence(q, k, v, masked=masked, log_gate=log_gate)
        type(self).used_kernel += 1
        return retention(q, k, v, self.gamma, chunk_size=_pow2(self.chunk_size))


# ---- benchmark builders (the registry's `bench`) -------------------------------------------------------------------

def linear_bench_fn(n, make, *, causal, **_):
    if not causal:
        raise ValueError("triton-linear is causal only: benchmark triton-linear-causal")

    def fn(q, k, v):
        return linear_attention_causal(elu_plus_one.query(q), elu_plus_one.key(k), v)
    return fn


def retention_bench_fn(n, make, *, causal, heads, **_):
    if not causal:
        raise ValueError("triton-retention is causal by construction: benchmark triton-retention-causal")
    gamma = retention_gammas(heads).to(make.device)
    return lambda q, k, v: retention(q, k, v, gamma)

