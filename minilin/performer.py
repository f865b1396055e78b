"""Performer attention (FAVOR+): softmax attention approximated by positive random features, in linear time.

The idea in one line: exp(qᵀk) = E_w[φ(q)·φ(k)] for random w ~ N(0, I_d), so softmax(Q Kᵀ) V can be
computed as φ(Q) (φ(K)ᵀ V), normalised by φ(Q) (φ(K)ᵀ 1) — O(N·m·D) instead of O(N²·D).

Shapes (the package-wide contract, see minilin/attention.py)
    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   mask: (B, M) bool, True = real token
    projection: (m, D), m = nb_features random directions w_i as rows
    features: (B, H, N, m) (positive) or (B, H, N, 2m) (trigonometric)

Numerical stability (FAVOR+ exponentiates; exp overflows float32 above ~88 and float16 above ~11)
    A positive feature is exp(w_iᵀx' − |x'|²/2)/√m with x' = x·D^(-1/4), and a factor shared by every term
    of a query's sums cancels in out = Σ_j φ(q)·φ(k_j) v_j / Σ_j φ(q)·φ(k_j). `favor_attention`, `favor_step`
    and `PerformerSelfAttention` hand the exponents (`PositiveRandomFeatures`: Wq' for queries, Wk' − |k'|²/2
    for keys) to `minilin.linear.linear_attention` / `linear_step`, which run the package's one stabilisation
    (minilin/linear.py, module docstring, "Stabilisation"): per-feature key maxima (non-causal), a running max
    per key position (causal scan; an underflowed row is 0 with a RuntimeWarning), a running max per feature
    (the recurrence); padded keys weigh exactly 0; float16/bfloat16 run in float32.
    `positive_features` and `causal_key_features` below are not on that path: they write the features out
    explicitly for the tests and notebook 04, each with the simpler shift its docstring states.
    Not done, and why: a data-free bound (w_iᵀk' − |k'|²/2 ≤ |w_i|²/2) is loose by tens in the exponent (81 at
    D = 128 for N(0, 1) keys): in float32 nearly every term of the normalisers is then subnormal, and the output
    error grows with the inputs' scale (notebook 04 measures it; tests/test_performer.py guards float32 at
    D = 128). performer-pytorch 1.1.4 shifts keys by one max over all positions and features, causal too, which
    lets the future into the past (its #82), and adds 1e-4 to every feature after the shift, which does not
    cancel (minilin.peers.PerformerPytorchFAVOR runs it, with or without those eps).

References: "Rethinking Attention with Performers", Choromanski et al. 2020, arXiv 2009.14794 (Lemma 1,
positive features; Lemma 2, their MSE vs trigonometric features; Thm 2, orthogonal rows; App. B.1, causal
prefix sums). "Transformers are RNNs", Katharopoulos et al. 2020, arXiv 2006.16236 (causal linear
attention as a recurrence with an (m × Dv) state).
"""
import math

import torch

from minilin.attention import check_mask
from minilin.linear import (LinearSelfAttention, LinearState, PositiveRandomFeatures, TrigRandomFeatures,
                            _check_projection, _floor, causal_linear_attention, global_linear_attention,
                            linear_attention, linear_step)

FavorState = LinearState  # the recurrent state of causal FAVOR+ is linear attention's

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
    """Block-orthogonal Gaussian projection (m, d): rows orthogonal within each block of d rows (Thm 2).

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


# ---- feature maps (explicit, for teaching and tests; the attention goes through minilin.linear) ----------

def _key_padding(mask, x):
    """(B, M) mask -> broadcastable to x's (B, [H,] M, features) with True = real."""
    check_mask(mask, batch=x.shape[0], length=x.shape[-2])
    return mask.view(mask.shape[0], *([1] * (x.ndim - 3)), mask.shape[1], 1)


def _projected(x, projection, normalize):
    """(Wx', |x'|²/2): (..., N, m) and (..., N, 1), x' = x·D^(-1/4) if normalize."""
    _check_projection(x, projection)
    return PositiveRandomFeatures(projection, normalize=normalize)._wx(x)


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
    return wx.sub_(_padded_shift(shift, mask, x)).exp_()  # in place: wx is a fresh temporary


def causal_key_features(k, projection, *, normalize=True, mask=None):
    """Causally stabilised positive key features: (psi, log_scale) with φ(k_j) = psi_j · exp(log_scale_j).

    k: (..., M, D) -> psi (..., M, m), log_scale (..., M). log_scale_j = max of the exponents of keys
    0..j (a running max over positions, never the future), so psi ≤ 1/√m and the largest feature seen
    so far is exactly 1/√m. `causal_linear_attention(..., k_log_scale=log_scale)` consumes them.
    mask: padded keys get psi = 0 and do not move the running max.
    """
    wx, half_sq = _projected(k, projection, normalize)  # (..., M, m), (..., M, 1)
    top = wx.detach().amax(dim=-1) - half_sq.detach()[..., 0]  # (..., M): each key's largest exponent
    top = torch.where(torch.isfinite(top), top, torch.full_like(top, -float("inf")))  # NaN/inf keys set no scale
    if mask is not None:
        top = top.masked_fill(~_key_padding(mask, k)[..., 0], float("-inf"))  # no say in the max
    r = torch.cummax(top, dim=-1).values  # (..., M) running max over positions ≤ j
    r = r.clamp(min=_floor(r.dtype))  # before the first real key: finite, and exp(floor − r) = 0
    shift = half_sq + r[..., None] + 0.5 * math.log(projection.shape[0])
    psi = wx.sub_(_padded_shift(shift, mask, k)).exp_()  # ≤ 1/√m: the exponent is ≤ r_j by construction
    return psi, r


def trig_features(x, projection, *, normalize=True, mask=None):
    """Trigonometric random features exp(|x'|²/2)/√m · [sin(Wx'), cos(Wx')]: (..., N, 2m).

    Unbiased for exp(x'ᵀy') too, but of both signs, so the attention normaliser can be ~0 or negative:
    Lemma 2 shows their error blows up exactly where softmax is small. Not stabilised.
    """
    phi = TrigRandomFeatures(projection, normalize=normalize).query(x)
    if mask is not None:
        phi = phi.masked_fill(~_key_padding(mask, x), 0.0)
    return phi


# ---- FAVOR+ attention ---------------------------------------------------------------------------------

def feature_map(projection, *, kernel="positive", normalize=True):
    """The FeatureMap of FAVOR+ ("positive") or of its trigonometric counterpart ("trig")."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    kind = PositiveRandomFeatures if kernel == "positive" else TrigRandomFeatures
    return kind(projection, normalize=normalize)


def favor_attention(q, k, v, projection, *, kernel="positive", mask=None, causal=False, chunk_size=64,
                    normalize=True):
    """FAVOR+ attention: softmax(q kᵀ/√D) v approximated with random features (arXiv 2009.14794, Alg. 1).

    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   projection: (m, D)   mask: (B, M) bool
    returns (B, H, N, Dv). kernel: "positive" (FAVOR+) or "trig". Same mask/causal semantics as
    `softmax_attention`; causal uses the chunked prefix-sum scan with `chunk_size` (64: the in-chunk products
    cost N·c·m and the prefix sums N·m·Dv, so with m = 256 features a chunk of 64 beats 128 on a CPU; measured
    with `python -m minilin bench --methods sdpa-causal,performer-causal`, see the README).
    normalize=False approximates softmax(q kᵀ) (no 1/√D), as the unit tests of the estimator need.
    It is `minilin.linear.linear_attention` with `feature_map(projection)`, stabilised as minilin/linear.py's
    module docstring says; float16/bfloat16 are computed in float32 and cast back.
    """
    return linear_attention(q, k, v, feature_map=feature_map(projection, kernel=kernel, normalize=normalize),
                            mask=mask, causal=causal, chunk_size=chunk_size)


def favor_step(q_t, k_t, v_t, projection, state=None, *, kernel="positive", normalize=True):
    """Causal FAVOR+ as a recurrence (arXiv 2006.16236 eq. 18-20): (out_t, state) for new token(s).

    q_t, k_t: (B, H, T, D)   v_t: (B, H, T, Dv). Memory O(m·Dv) whatever the length so far; running it over
    a sequence equals favor_attention(..., causal=True). See `minilin.linear.linear_step`.
    """
    return linear_step(q_t, k_t, v_t, state,
                       feature_map=feature_map(projection, kernel=kernel, normalize=normalize))


# ---- the module ---------------------------------------------------------------------------------------

def default_nb_features(dim_head):
    """performer-pytorch's default m = int(d · ln d) (at least 1)."""
    return max(1, int(dim_head * math.log(dim_head)))


def _mix_seed(seed, count):
    """A generator seed from (seed, redraw count): the same on every DDP rank with no communication."""
    return (int(seed) * 0x9E3779B97F4A7C15 + int(count) * 0xBF58476D1CE4E5B9 + 1) % (2 ** 63)


class PerformerSelfAttention(LinearSelfAttention):
    """Multi-head self-attention whose mixing step is FAVOR+ (arXiv 2009.14794).

    Reuses MultiHeadSelfAttention's to_q/to_k/to_v/to_out, so weights move to and from exact attention
    with load_state_dict(strict=False). Buffers: `projection` (m, dim_head) shared by the heads, `redraws`
    (how many times it was redrawn) and `calls` (training forwards so far). nb_features defaults to
    int(dim_head · ln dim_head), performer-pytorch's default. In training mode the projection is redrawn
    before every `redraw_interval`-th forward call (None: never), deterministically from (seed, redraws),
    so every DDP rank draws the same matrix without communicating; eval mode never redraws.
    """

    def __init__(self, dim, heads=8, *, nb_features=None, ortho=True, kernel="positive", redraw_interval=None,
                 dim_head=None, dropout=0.0, seed=0, bias=False, scaling="chi", chunk_size=128):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias, chunk_size=chunk_size)
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        if redraw_interval is not None and (not isinstance(redraw_interval, int) or redraw_interval < 1):
            raise ValueError(f"redraw_interval must be a positive int or None, got {redraw_interval!r}")
        if nb_features is not None and (not isinstance(nb_features, int) or nb_features < 1):
            raise ValueError(f"nb_features must be a positive int or None (= dim_head·ln dim_head), got {nb_features!r}")
        self.nb_features = nb_features or default_nb_features(self.dim_head)
        self.ortho, self.kernel, self.scaling = ortho, kernel, scaling
        self.redraw_interval, self.seed = redraw_interval, seed
        self.register_buffer("projection", self.draw_projection(torch.Generator().manual_seed(_mix_seed(seed, 0))))
        self.register_buffer("redraws", torch.zeros((), dtype=torch.long))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    @property
    def feature_map(self):
        return feature_map(self.projection, kernel=self.kernel)

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

    def forward(self, x, *, mask=None, causal=False):
        if self.training:
            if self.redraw_interval is not None and self.calls > 0 and self.calls % self.redraw_interval == 0:
                self.redraw()
            self.calls += 1
        return super().forward(x, mask=mask, causal=causal)
