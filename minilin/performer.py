"""Performer attention (FAVOR+): softmax attention approximated by positive random features, in linear time.

The idea in one line: exp(qᵀk) = E_w[φ(q)·φ(k)] for random w ~ N(0, I_d), so softmax(Q Kᵀ) V can be
computed as φ(Q) (φ(K)ᵀ V), normalised by φ(Q) (φ(K)ᵀ 1) — O(N·m·D) instead of O(N²·D).

Shapes (the package-wide contract, see minilin/attention.py)
    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   mask: (B, M) bool, True = real token
    projection: (m, D), m = nb_features random directions w_i as rows
    features: (B, H, N, m) (positive) or (B, H, N, 2m) (trigonometric)

Numerical stability (FAVOR+ exponentiates; exp overflows float32 above ~88 and float16 above ~11)
    A positive feature is exp(w_iᵀx' − |x'|²/2)/√m with x' = x·D^(-1/4). A factor shared by every term
    of a query's sums cancels in out = Σ_j φ(q)·φ(k_j) v_j / Σ_j φ(q)·φ(k_j), so:
    - queries subtract their own row max (a per-query constant);
    - non-causal keys subtract the largest exponent over all real keys (one constant for the whole sum);
    - causal keys may not look ahead (performer-pytorch's max over *all* positions lets the future into
      the past, its #82). They subtract a *running* max r_j = max over positions ≤ j, which only grows;
      the prefix sums carry it as a log-scale and are rescaled by exp(r_old − r_new) ≤ 1 when it grows —
      the online-softmax trick, applied to the (m × Dv) state. A data-free bound also exists
      (w_iᵀk' − |k'|²/2 ≤ |w_i|²/2), but it is loose by tens in the exponent (81 at D = 128 for N(0, 1)
      keys): in float32 key features fall near 1e-35 and their products with query features underflow
      (output errors of O(1) measured at D = 128; tests/test_performer.py guards float32 there).
    Padded keys get exactly zero feature rows (φ(0) = 1/√m is not zero) and never enter a max.
    float16/bfloat16 inputs are computed in float32 and the output cast back: the sums of N features
    overflow float16 long before the exponentials do (fast-transformers#32).

References: "Rethinking Attention with Performers", Choromanski et al. 2020, arXiv 2009.14794 (Lemma 1,
positive features; Lemma 2, their MSE vs trigonometric features; Thm 3, orthogonal rows; App. B.1, causal
prefix sums). "Transformers are RNNs", Katharopoulos et al. 2020, arXiv 2006.16236 (causal linear
attention as a recurrence with an (m × Dv) state).
"""
import math
from dataclasses import dataclass

import torch

from minilin.attention import MultiHeadSelfAttention, check_attention_inputs, check_mask

KERNELS = ("positive", "trig")
SCALINGS = ("chi", "fixed")


# ---- random projections ------------------------------------------------------------------------------

def _check_generator(generator):
    if not isinstance(generator, torch.Generator):
        raise TypeError("pass an explicit CPU generator, e.g. generator=torch.Generator().manual_seed(0), "
                        f"got {type(generator).__name__}")


def gaussian_projection(nb_features, dim, *, generator, dtype=torch.float32, device=None):
    """iid N(0, 1) projection: (m, d) rows w_i ~ N(0, I_d) (Lemma 1's unbiased estimator).

    Drawn on the CPU in float64 from `generator` and then cast, so the same seed gives the same matrix on
    every device and dtype.
    """
    _check_generator(generator)
    w = torch.randn(nb_features, dim, generator=generator, dtype=torch.float64)  # (m, d)
    return w.to(dtype=dtype, device=device)


def orthogonal_gaussian(nb_features, dim, *, generator, scaling="chi", dtype=torch.float32, device=None):
    """Block-orthogonal Gaussian projection (m, d): rows orthogonal within each block of d rows (Thm 3).

    Each block is the Q of a QR factorisation of a d×d Gaussian matrix, sign-corrected by diag(R) so that
    it is Haar-distributed (each row uniform on the sphere); m > d stacks independent blocks, the last one
    truncated. Row norms: scaling="chi" draws them from chi(d) (the norm of an N(0, I_d) vector, so every
    row is marginally N(0, I_d) and the estimator stays unbiased); scaling="fixed" sets them to √d.
    """
    _check_generator(generator)
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")
    nb_blocks = math.ceil(nb_features / dim)
    g = torch.randn(nb_blocks, dim, dim, generator=generator, dtype=torch.float64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small QRs gain nothing from threads, and MKL's threaded QR stalls ~1000x on a
    try:  # busy CPU (measured: 2 s instead of 3 ms for 32 blocks of 64 × 64 with 2 threads under load)
        q, r = torch.linalg.qr(g)  # batched over blocks: (nb_blocks, d, d)
    finally:
        torch.set_num_threads(threads)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]  # Haar; plain Householder QR is not
    w = q.transpose(-2, -1).reshape(nb_blocks * dim, dim)[:nb_features]  # rows of Qᵀ: (m, d), unit rows
    if scaling == "chi":
        norms = torch.randn(nb_features, dim, generator=generator, dtype=torch.float64).norm(dim=1)
    else:
        norms = torch.full((nb_features,), math.sqrt(dim), dtype=torch.float64)
    return (w * norms[:, None]).to(dtype=dtype, device=device)


# ---- feature maps ------------------------------------------------------------------------------------

def _check_projection(x, projection):
    if projection.ndim != 2 or projection.shape[1] != x.shape[-1]:
        raise ValueError(f"projection must have shape (nb_features, head_dim={x.shape[-1]}), got "
                         f"{tuple(projection.shape)}; draw it with orthogonal_gaussian(m, {x.shape[-1]}, ...)")


def _key_padding(mask, x):
    """(B, M) mask -> broadcastable to x's (B, [H,] M, features) with True = real."""
    check_mask(mask, batch=x.shape[0], length=x.shape[-2])
    return mask.view(mask.shape[0], *([1] * (x.ndim - 3)), mask.shape[1], 1)


def _projected(x, projection, normalize):
    """(Wx', |x'|²/2): (..., N, m) and (..., N, 1), x' = x·D^(-1/4) if normalize. A positive feature's
    exponent is their difference; keeping them apart lets every shift below be one pass over (N, m)."""
    _check_projection(x, projection)
    scale = x.shape[-1] ** -0.25 if normalize else 1.0
    wx = x @ (projection.to(x.dtype).T * scale)  # (..., N, m)
    return wx, 0.5 * scale ** 2 * (x * x).sum(-1, keepdim=True)


def _padded_shift(shift, mask, x):
    """Padded keys: shift = +inf, so exp(wx − shift) is exactly 0 with a zero gradient (φ(0) is not 0)."""
    if mask is None:
        return shift
    return shift.masked_fill(~_key_padding(mask, x), float("inf"))


def positive_features(x, projection, *, is_query, stabilize=True, normalize=True, mask=None):
    """Positive random features φ(x) = exp(Wx' − |x'|²/2)/√m, x' = x·D^(-1/4) (Lemma 1): (..., N, m).

    E[φ(q)·φ(k)] = exp(q'ᵀk') = exp(qᵀk/√D) for rows w_i ~ N(0, I_D) (normalize=False drops the D^(-1/4)).
    stabilize=False returns exactly that estimator (it overflows for large x). stabilize=True divides
    - queries (is_query=True) by their own row max: each row changes by a positive factor;
    - keys by the max over all real keys and features: the whole set changes by one positive factor.
    Both cancel in non-causal attention; for causal keys use `causal_key_features`. The maxima are
    detached (they cancel, so their true gradient contribution is zero).
    mask: (B, N) bool for keys, True = real; padded rows become exactly 0 (φ(0) is not 0).
    """
    wx, half_sq = _projected(x, projection, normalize)  # (..., N, m), (..., N, 1)
    shift = half_sq + 0.5 * math.log(projection.shape[0])  # the 1/√m folded into the exponent
    if stabilize and is_query:
        shift = wx.detach().amax(dim=-1, keepdim=True) + 0.5 * math.log(projection.shape[0])  # |q'|²/2 is
        # a per-row constant too: subtracting the row max of Wq' alone gives the same row up to rounding
    elif stabilize:
        top = (wx.detach().amax(dim=-1, keepdim=True) - half_sq.detach())  # (..., N, 1) each key's max exponent
        if mask is not None:
            top = top.masked_fill(~_key_padding(mask, x), float("-inf"))
        top = top.amax(dim=-2, keepdim=True)  # one max over all real keys
        shift = shift + torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # all padded: no shift
    return wx.sub_(_padded_shift(shift, mask, x)).exp_()  # in place: wx is a fresh temporary (saves 2 passes)


def _running_floor(dtype):
    """A finite stand-in for max over no key yet (all padded so far): exp(floor − anything real) = 0."""
    return torch.finfo(dtype).min / 4


def causal_key_features(k, projection, *, normalize=True, mask=None):
    """Causally stabilised positive key features: (psi, log_scale) with φ(k_j) = psi_j · exp(log_scale_j).

    k: (..., M, D) -> psi (..., M, m), log_scale (..., M). log_scale_j = max of the exponents of keys
    0..j (a running max over positions, never the future), so psi ≤ 1/√m and the largest feature seen
    so far is exactly 1/√m. `causal_linear_attention(..., k_log_scale=log_scale)` consumes them.
    mask: padded keys get psi = 0 and do not move the running max.
    """
    wx, half_sq = _projected(k, projection, normalize)  # (..., M, m), (..., M, 1)
    top = wx.detach().amax(dim=-1) - half_sq.detach()[..., 0]  # (..., M): each key's largest exponent
    if mask is not None:
        top = top.masked_fill(~_key_padding(mask, k)[..., 0], float("-inf"))  # no say in the max
    r = torch.cummax(top, dim=-1).values  # (..., M) running max over positions ≤ j
    r = r.clamp(min=_running_floor(r.dtype))  # before the first real key: finite, and exp(floor − r) = 0
    shift = half_sq + r[..., None] + 0.5 * math.log(projection.shape[0])
    psi = wx.sub_(_padded_shift(shift, mask, k)).exp_()  # ≤ 1/√m: the exponent is ≤ r_j by construction
    return psi, r


def trig_features(x, projection, *, normalize=True, mask=None):
    """Trigonometric random features exp(|x'|²/2)/√m · [sin(Wx'), cos(Wx')]: (..., N, 2m).

    Unbiased for exp(x'ᵀy') too (Rahimi & Recht's features for the Gaussian kernel times exp(|x'|²/2 +
    |y'|²/2)), but they take both signs, so the attention denominator can be ~0 or negative: Lemma 2 shows
    their error blows up exactly where softmax is small. Not stabilised (exp(+|x'|²/2) has no bound); kept
    to show why FAVOR+ uses positive features.
    """
    _check_projection(x, projection)
    d = x.shape[-1]
    scale = d ** -0.25 if normalize else 1.0
    wx = x @ (projection.to(x.dtype).T * scale)  # (..., N, m)
    amp = torch.exp(0.5 * scale ** 2 * (x * x).sum(-1, keepdim=True)) * projection.shape[0] ** -0.5
    phi = torch.cat([torch.sin(wx), torch.cos(wx)], dim=-1) * amp  # (..., N, 2m)
    if mask is not None:
        phi = phi.masked_fill(~_key_padding(mask, x), 0.0)
    return phi


# ---- linear attention on features ---------------------------------------------------------------------

def _with_ones(v):
    """[v | 1]: one matmul then gives numerator and normaliser together (App. B.1)."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)  # (B, H, M, Dv+1)


class _Ratio(torch.autograd.Function):
    """num / den row by row (den: (..., 1)), safe in float32 and with a backward that never squares den.

    A row whose normaliser underflows (|den| ≤ tiny/eps: no key visible, or every feature product below
    ~1e-31 in float32, where they are subnormal and imprecise anyway) outputs 0 with zero gradient, like
    a fully-masked row. Autograd's own division backward, −g·num/den², overflows float32 as soon as
    den < 1e-19; here ∂/∂den = −g·out/den, with |out| ≤ max |v|.
    """

    @staticmethod
    def forward(ctx, num, den):
        info = torch.finfo(den.dtype)
        ok = den.abs() > info.tiny / info.eps
        den = torch.where(ok, den, torch.ones_like(den))
        out = torch.where(ok, num / den, torch.zeros_like(num))
        ctx.save_for_backward(out, den, ok)
        return out

    @staticmethod
    def backward(ctx, g):
        out, den, ok = ctx.saved_tensors
        g = torch.where(ok, g, torch.zeros_like(g)) / den
        return g, -(g * out).sum(-1, keepdim=True)


def _divide(o):
    """o = [numerator | normaliser] -> numerator / normaliser; a row with no weight at all gives 0, not NaN."""
    return _Ratio.apply(o[..., :-1], o[..., -1:])


def linear_attention(phi_q, phi_k, v):
    """Non-causal linear attention φ(Q) (φ(K)ᵀ V) / φ(Q) (φ(K)ᵀ 1): O(N·m·Dv) time, (m × Dv) state.

    phi_q: (B, H, N, m)   phi_k: (B, H, M, m)   v: (B, H, M, Dv)  ->  (B, H, N, Dv)
    """
    kv = phi_k.transpose(-2, -1) @ _with_ones(v)  # (B, H, m, Dv+1): Σ_j φ(k_j) [v_j | 1]ᵀ
    return _divide(phi_q @ kv)  # (B, H, N, Dv)


def causal_linear_attention(phi_q, phi_k, v, *, chunk_size=128, k_log_scale=None):
    """Causal linear attention by chunked prefix sums: query i sees keys j ≤ i + (M − N) (bottom-right).

    phi_q: (B, H, N, m)   phi_k: (B, H, M, m)   v: (B, H, M, Dv)  ->  (B, H, N, Dv)
    k_log_scale: (B, H, M), non-decreasing along M, or None (= 0): the key features are
    phi_k_j · exp(k_log_scale_j) (see `causal_key_features`, which keeps phi_k ≤ 1/√m this way).
    Inside a chunk of c positions: the quadratic form (φ(Q_c) φ(K_c)ᵀ ⊙ lower-triangle) [V_c | 1].
    Across chunks: φ(Q_c) S_{<c}, where S_{<c} = Σ_{earlier chunks} φ(K)ᵀ [V | 1] is an (m × Dv+1) prefix sum
    (App. B.1), kept at the log-scale of the last key it holds and rescaled by exp(r_old − r_new) ≤ 1.
    Time O(N·c·m + N·c·Dv + N·m·Dv); memory O(N·c + (N/c)·m·Dv) — never an (N, m, Dv) tensor.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size}")
    B, H, N, m = phi_q.shape
    M = phi_k.shape[2]
    v1 = _with_ones(v)  # (B, H, M, Dv+1)
    E = v1.shape[-1]
    scaled = k_log_scale is not None
    r = k_log_scale.detach() if scaled else phi_k.new_zeros(B, H, M)  # (B, H, M)
    skipped, state, r_state = 0, phi_q.new_zeros(B, H, m, E), r[:, :, 0]
    if M > N:  # the first M − N keys are visible to every query: fold them into the initial state
        p = M - N
        r_state = r[:, :, p - 1]  # (B, H): the state's log-scale
        w = torch.exp(r[:, :, :p] - r_state[..., None])[..., None] if scaled else 1.0  # ≤ 1
        state = (phi_k[:, :, :p] * w).transpose(-2, -1) @ v1[:, :, :p]  # (B, H, m, Dv+1)
        phi_k, v1, r = phi_k[:, :, p:], v1[:, :, p:], r[:, :, p:]
    elif N > M:  # the first N − M queries see no key at all: zero rows
        skipped = N - M
        phi_q = phi_q[:, :, skipped:]
    n = phi_k.shape[2]
    c = max(1, min(chunk_size, n))
    nc = -(-n // c)
    pad = nc * c - n  # zero features past the end contribute nothing; their outputs are cut off below
    if pad:
        phi_q, phi_k, v1 = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, v1))
        r = torch.cat([r, r[:, :, -1:].expand(B, H, pad)], dim=2)  # stays non-decreasing
    qc, kc, vc = phi_q.view(B, H, nc, c, m), phi_k.view(B, H, nc, c, m), v1.view(B, H, nc, c, E)
    rc = r.reshape(B, H, nc, c)
    tri = torch.ones(c, c, dtype=torch.bool, device=phi_q.device).tril()
    scores = qc @ kc.transpose(-2, -1)  # (B, H, nc, c, c)
    if scaled:  # key j seen from query i ≥ j, both at query i's scale: exp(r_j − r_i) ≤ 1, 0 for j > i
        scores = scores * (rc[..., None, :] - rc[..., :, None]).masked_fill_(~tri, float("-inf")).exp_()
    else:
        scores = scores.masked_fill(~tri, 0.0)
    o = scores @ vc  # (B, H, nc, c, Dv+1): causal inside the chunk
    r_end = rc[..., -1]  # (B, H, nc): each chunk's state increment is kept at its last key's scale
    if scaled:
        vc = vc * torch.exp(rc - r_end[..., None])[..., None]  # scale [v | 1] (Dv+1 wide), not φ(k) (m wide)
    chunk_kv = kc.transpose(-2, -1) @ vc  # (B, H, nc, m, Dv+1)
    before, r_before = [], []
    for i in range(nc):  # the prefix sum over chunks: nc small (m × Dv+1) updates
        before.append(state)
        r_before.append(r_state)
        decay = torch.exp(r_state - r_end[:, :, i])[..., None, None] if scaled else 1.0
        state = state * decay + chunk_kv[:, :, i]
        r_state = r_end[:, :, i]
    inter = qc @ torch.stack(before, dim=2)  # (B, H, nc, c, Dv+1): φ(Q_c) S_{<c}
    if scaled:
        inter = inter * torch.exp(torch.stack(r_before, dim=2)[..., None] - rc)[..., None]  # ≤ 1
    out = _divide((o + inter).view(B, H, nc * c, E)[:, :, :n])  # (B, H, n, Dv)
    if skipped:
        out = torch.cat([out.new_zeros(B, H, skipped, E - 1), out], dim=2)
    return out


# ---- FAVOR+ attention ---------------------------------------------------------------------------------

def _compute_dtype(t):
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def favor_attention(q, k, v, projection, *, kernel="positive", mask=None, causal=False, chunk_size=128,
                    normalize=True):
    """FAVOR+ attention: softmax(q kᵀ/√D) v approximated with random features (arXiv 2009.14794, Alg. 1).

    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   projection: (m, D)   mask: (B, M) bool
    returns (B, H, N, Dv). kernel: "positive" (FAVOR+) or "trig". Same mask/causal semantics as
    `softmax_attention`: padded keys get zero feature rows; causal is bottom-right aligned and uses
    `causal_linear_attention` with `chunk_size`; a query that sees no key outputs zeros.
    normalize=False approximates softmax(q kᵀ) (no 1/√D), as the unit tests of the estimator need.
    float16/bfloat16 are computed in float32 (see the module docstring) and cast back.
    """
    check_attention_inputs(q, k, v, mask)
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    out_dtype = q.dtype
    dtype = _compute_dtype(q)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    log_scale = None
    if kernel == "positive":
        phi_q = positive_features(q, projection, is_query=True, normalize=normalize)  # (B, H, N, m)
        if causal:
            phi_k, log_scale = causal_key_features(k, projection, normalize=normalize, mask=mask)
        else:
            phi_k = positive_features(k, projection, is_query=False, normalize=normalize, mask=mask)
    else:
        phi_q = trig_features(q, projection, normalize=normalize)  # (B, H, N, 2m)
        phi_k = trig_features(k, projection, normalize=normalize, mask=mask)
    if causal:
        out = causal_linear_attention(phi_q, phi_k, v, chunk_size=chunk_size, k_log_scale=log_scale)
    else:
        out = linear_attention(phi_q, phi_k, v)
    return out.to(out_dtype)  # (B, H, N, Dv)


@dataclass
class FavorState:
    """Running state of causal FAVOR+ decoding (B, H batch dims): kv = Σ_j φ(k_j) v_jᵀ (B, H, m, Dv) and
    z = Σ_j φ(k_j) (B, H, m), both stored divided by exp(log_scale) (B, H), the running max of the key
    exponents (0 for trig features); position = tokens consumed (the next token's position, for RoPE)."""
    kv: torch.Tensor
    z: torch.Tensor
    log_scale: torch.Tensor
    position: int = 0


def favor_step(q_t, k_t, v_t, projection, state=None, *, kernel="positive", normalize=True):
    """Causal FAVOR+ as a recurrence (arXiv 2006.16236 eq. 18-20): (out_t, state) for new token(s).

    q_t, k_t: (B, H, T, D)   v_t: (B, H, T, Dv), usually T = 1; tokens are consumed one at a time:
        kv += φ(k_t) v_tᵀ,  z += φ(k_t),  out_t = φ(q_t) kv / φ(q_t) z
    (with the running-max rescaling of `causal_key_features`). Memory is O(m·Dv) whatever the length so
    far. Running it over a sequence equals favor_attention(..., causal=True).
    """
    check_attention_inputs(q_t, k_t, v_t)
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if q_t.shape[2] != k_t.shape[2]:
        raise ValueError(f"favor_step consumes as many queries as keys, got {q_t.shape[2]} and {k_t.shape[2]}")
    out_dtype = q_t.dtype
    dtype = _compute_dtype(q_t)
    q_t, k_t, v_t = q_t.to(dtype), k_t.to(dtype), v_t.to(dtype)
    positive = kernel == "positive"
    if positive:
        phi_q = positive_features(q_t, projection, is_query=True, normalize=normalize)  # (B, H, T, m)
        wx, half_sq = _projected(k_t, projection, normalize)
        e_k = wx - half_sq  # (B, H, T, m): the key exponents
        top = e_k.detach().amax(dim=-1)  # (B, H, T)
    else:
        phi_q = trig_features(q_t, projection, normalize=normalize)  # (B, H, T, 2m)
        phi_k = trig_features(k_t, projection, normalize=normalize)
    B, H, T, m = phi_q.shape
    Dv = v_t.shape[-1]
    if state is None:
        floor = _running_floor(dtype) if positive else 0.0
        state = FavorState(kv=phi_q.new_zeros(B, H, m, Dv), z=phi_q.new_zeros(B, H, m),
                           log_scale=phi_q.new_full((B, H), floor), position=0)
    if state.kv.shape != (B, H, m, Dv):
        raise ValueError(f"state.kv has shape {tuple(state.kv.shape)}, expected {(B, H, m, Dv)}; "
                         "start a new sequence with state=None")
    kv, z, r = state.kv.to(dtype), state.z.to(dtype), state.log_scale.to(dtype)
    outs = []
    for t in range(T):
        if positive:
            r_new = torch.maximum(r, top[:, :, t])  # (B, H): the running max grows or stays
            decay = torch.exp(r - r_new)  # ≤ 1: rescale the old sums to the new scale
            f = torch.exp(e_k[:, :, t] - r_new[..., None]) * m ** -0.5  # (B, H, m), ≤ 1/√m
            kv = kv * decay[..., None, None] + f[..., None] * v_t[:, :, t, None, :]  # rank-one update
            z = z * decay[..., None] + f
            r = r_new
        else:
            kv = kv + phi_k[:, :, t, :, None] * v_t[:, :, t, None, :]
            z = z + phi_k[:, :, t]
        num = (phi_q[:, :, t, :, None] * kv).sum(-2)  # (B, H, Dv)
        den = (phi_q[:, :, t] * z).sum(-1, keepdim=True)  # (B, H, 1)
        outs.append(_Ratio.apply(num, den))
    out = torch.stack(outs, dim=2).to(out_dtype)  # (B, H, T, Dv)
    return out, FavorState(kv=kv, z=z, log_scale=r, position=state.position + T)


# ---- the module ---------------------------------------------------------------------------------------

def _mix_seed(seed, count):
    """A generator seed from (seed, redraw count): the same on every DDP rank with no communication."""
    return (int(seed) * 0x9E3779B97F4A7C15 + int(count) * 0xBF58476D1CE4E5B9 + 1) % (2 ** 63)


class PerformerSelfAttention(MultiHeadSelfAttention):
    """Multi-head self-attention whose mixing step is FAVOR+ (arXiv 2009.14794).

    Reuses MultiHeadSelfAttention's to_q/to_k/to_v/to_out, so weights move to and from exact attention
    with load_state_dict(strict=False). Buffers: `projection` (m, dim_head) shared by the heads, `redraws`
    (how many times it was redrawn) and `calls` (training forwards so far). nb_features defaults to
    int(dim_head · ln dim_head), performer-pytorch's default. In training mode the projection is redrawn
    before every `redraw_interval`-th forward call (None: never), deterministically from (seed, redraws),
    so every DDP rank draws the same matrix without communicating; eval mode never redraws.
    """

    def __init__(self, dim, heads=8, nb_features=None, ortho=True, kernel="positive", redraw_interval=None,
                 dim_head=None, dropout=0.0, seed=0, bias=False, scaling="chi", chunk_size=128):
        super().__init__(dim, heads=heads, dim_head=dim_head, dropout=dropout, bias=bias)
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        if redraw_interval is not None and redraw_interval < 1:
            raise ValueError(f"redraw_interval must be a positive int or None, got {redraw_interval}")
        d = self.dim_head
        self.nb_features = nb_features or max(1, int(d * math.log(d)))
        self.ortho, self.kernel, self.scaling = ortho, kernel, scaling
        self.redraw_interval, self.seed, self.chunk_size = redraw_interval, seed, chunk_size
        self.register_buffer("projection", self.draw_projection(torch.Generator().manual_seed(_mix_seed(seed, 0))))
        self.register_buffer("redraws", torch.zeros((), dtype=torch.long))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def draw_projection(self, generator):
        """A fresh (m, dim_head) projection from `generator` (orthogonal or iid, as configured)."""
        if self.ortho:
            return orthogonal_gaussian(self.nb_features, self.dim_head, generator=generator, scaling=self.scaling)
        return gaussian_projection(self.nb_features, self.dim_head, generator=generator)

    @torch.no_grad()
    def redraw(self, generator=None):
        """Replace the projection: from `generator` if given, else from (seed, redraws + 1)."""
        self.redraws += 1
        if generator is None:
            generator = torch.Generator().manual_seed(_mix_seed(self.seed, int(self.redraws)))
        self.projection.copy_(self.draw_projection(generator))  # copy_ keeps the buffer's dtype and device

    def mix(self, q, k, v, *, mask=None, causal=False):
        return favor_attention(q, k, v, self.projection, kernel=self.kernel, mask=mask, causal=causal,
                               chunk_size=self.chunk_size)

    def forward(self, x, *, mask=None, causal=False):
        if self.training:
            if self.redraw_interval is not None and self.calls > 0 and self.calls % self.redraw_interval == 0:
                self.redraw()
            self.calls += 1
        return super().forward(x, mask=mask, causal=causal)

    def step(self, x_t, state=None):
        """Causal decoding, one token (or a few) at a time with O(m·Dv) memory: x_t (B, T, dim) -> (B, T, dim).

        Returns (y_t, state); pass the state back for the next token. Applies self.rotary(q, k, position)
        when set, position = tokens consumed so far. Equals forward(x, causal=True) position by position.
        """
        if x_t.ndim != 3 or x_t.shape[-1] != self.dim:
            raise ValueError(f"x_t must have shape (batch, tokens, {self.dim}), got {tuple(x_t.shape)}")
        q, k, v = (self.split_heads(f(x_t)) for f in (self.to_q, self.to_k, self.to_v))  # (B, H, T, Dh)
        position = 0 if state is None else state.position
        if self.rotary is not None:
            q, k = self.rotary(q, k, position)
        out, state = favor_step(q, k, v, self.projection, state, kernel=self.kernel)
        return self.dropout(self.to_out(self.merge_heads(out))), state
