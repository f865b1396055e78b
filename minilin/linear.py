"""Linear attention as a choice of feature map: softmax(q kᵀ) v replaced by φ(q) (φ(k)ᵀ v) / φ(q) (φ(k)ᵀ 1).

    out_i = Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j)     ("Transformers are RNNs", Katharopoulos et al.
                                                              2020, arXiv 2006.16236, eq. 4-6)
Associativity turns the (N × M) matrix into an (F × Dv) state Σ_j φ(k_j) v_jᵀ. The variants differ in φ:
    elu_plus_one             elu(x) + 1                                Katharopoulos et al. 2020
    PositiveRandomFeatures   exp(Wx' − |x'|²/2)/√m                     Performer / FAVOR+ (arXiv 2009.14794)
    TrigRandomFeatures       exp(|x'|²/2)/√m · [sin Wx', cos Wx']      Performer's counter-example
    EfficientPair            softmax over q's features; exp(k)         causal efficient attention (Shen et al.,
                                                                       arXiv 1812.01243), as linear-attention-
                                                                       transformer computes it (minilin.efficient)
Shapes and mask/causal semantics: the package contract (minilin/attention.py). One chunked causal scan
(`_scan`): inside a chunk the masked quadratic form, across chunks an (F × Dv+1) prefix sum (App. B.1 of
arXiv 2009.14794), computed without a Python loop over chunks (`chunk_states`); never an (N, F, Dv) tensor.

Stabilisation: the rule every attention with exponential features runs (FAVOR+'s PositiveRandomFeatures,
EfficientPair: favor_attention, efficient_attention causal, their modules and `step`s), described only here.
Exponents overflow exp (float32 above e ≈ 88), and a factor common to a query's numerator and normaliser
cancels, so `linear_attention` and `linear_step` shift them before exp:
  non-causal   feature f of every key by C_f, its max over the real keys; query i by max_f(e_if + C_f). Each
               row's largest term is exactly 1, so its normaliser cannot underflow.
  causal       key j by r_j, one running max over features and positions ≤ j (never the future: a max over all
               positions lets later keys into earlier outputs, performer-pytorch#82), carried through the scan as a
               log-scale and rescaled by exp(r_old − r_new) ≤ 1 (the online-softmax trick); query i by its own
               row max. One number per key keeps the in-chunk part one matrix product, but if a query's large
               features meet only small key features its normaliser underflows: that row is 0 and a
               RuntimeWarning says so (inputs of norm ~10 in float32; scale them down or use float64).
  recurrent    `linear_step`: a running max per feature c_f (the state's rows stored divided by exp(c_f)), queries
               as in the non-causal case, so each row's largest term is exactly 1 and no row is lost.
Padded keys get exponent −inf: weight exactly 0 (φ(0) is not 0, performer-pytorch#89). float16/bfloat16 are
computed in float32 (fast-transformers#32). The maxima are detached: they cancel, so their gradient is zero.

Non-finite inputs reach exactly the outputs that may see them (NaN out, never a silent zero); with
causal=True, outputs before a NaN/inf query or key are bit-identical to a run without it. A NaN *value* can
still reach earlier outputs of its chunk through 0·NaN in a matrix product, as in scaled_dot_product_attention.
"""
import warnings
from dataclasses import dataclass

import torch

from minilin.attention import MultiHeadSelfAttention, allowed_keys, check_attention_inputs
from minilin.chunk_scan import chunk_states  # noqa: F401 (part of this module's interface)
from minilin.feature_maps import (  # noqa: F401 (the maps are part of this module's interface)
    EfficientPair, ELUPlusOne, FeatureMap, PositiveRandomFeatures, TrigRandomFeatures, _check_projection, elu_plus_one)


# ---- the ratio and the scans ------------------------------------------------------------------------------

class _Ratio(torch.autograd.Function):
    """num / den row by row (den: (..., 1)), with a backward that never squares den (−g·num/den² overflows
    float32 for den < 1e-19). A row whose den underflowed (exactly 0: no visible key) outputs 0 with
    gradient 0; `linear_attention` warns when that happens to a row that does see keys. NaN stays NaN. The backward is written in differentiable operations on the inputs, so second derivatives
    (torch.autograd.gradgradcheck) are correct too."""

    @staticmethod
    def forward(ctx, num, den):
        ctx.save_for_backward(num, den)
        return _ratio(num, den)[0]

    @staticmethod
    def backward(ctx, g):
        num, den = ctx.saved_tensors
        out, safe, empty = _ratio(num, den)
        g = torch.where(empty, torch.zeros_like(g), g) / safe
        return g, -(g * out).sum(-1, keepdim=True)


def _underflowed(den):
    """|den| too small to divide by (no visible key gives exactly 0; below tiny/eps the normaliser's terms are
    subnormal and the quotient is noise): such a row outputs 0 with zero gradient."""
    info = torch.finfo(den.dtype)
    return den.abs() <= info.tiny / info.eps


def _ratio(num, den):
    empty = _underflowed(den)
    safe = torch.where(empty, torch.ones_like(den), den)
    return torch.where(empty, torch.zeros_like(num), num / safe), safe, empty


def _divide(o):
    """o = [numerator | normaliser] -> numerator / normaliser."""
    return _Ratio.apply(o[..., :-1], o[..., -1:])


def _with_ones(v):
    """[v | 1]: one matmul then gives numerator and normaliser together (App. B.1 of arXiv 2009.14794)."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)


def global_linear_attention(phi_q, phi_k, v):
    """Non-causal linear attention on given features: φ(Q) (φ(K)ᵀ [V | 1]), divided.

    phi_q: (B, H, N, F)   phi_k: (B, H, M, F)   v: (B, H, M, Dv)  ->  (B, H, N, Dv)
    """
    kv = phi_k.transpose(-2, -1) @ _with_ones(v)  # (B, H, F, Dv+1): Σ_j φ(k_j) [v_j | 1]ᵀ
    return _divide(phi_q @ kv)  # (B, H, N, Dv)


def visible_counts(n, m, *, causal=False, bucket_size=None, device=None):
    """How many keys (a prefix 0..c-1) each of the N queries may see: a (N,) long tensor.

    Non-causal: all M. Causal: query i sits at key position p = i + (M − N) (bottom-right alignment) and
    sees p + 1 keys; with bucket_size B > 1 it sees the floor(p / B)·B keys of the buckets before its own.
    """
    if not causal:
        return torch.full((n,), m, dtype=torch.long, device=device)
    p = torch.arange(n, device=device) + (m - n)  # key position of query i
    counts = p + 1 if bucket_size in (None, 1) else torch.div(p, bucket_size, rounding_mode="floor") * bucket_size
    return counts.clamp(0, m)


def _floor(dtype):
    """A finite stand-in for 'no key yet' in a running max: exp(floor − anything real) = 0."""
    return torch.finfo(dtype).min / 4


class _Chunks:
    """Queries placed at key positions 0..M-1 and cut into nc chunks of c (the scan's layout).

    Later queries than keys see nothing (`skipped`, zero rows); earlier keys than queries are seen by every
    query (`lead` zero queries stand in front and are dropped at the end); the tail is zero-padded.
    """

    def __init__(self, n, m, c):
        self.n, self.m, self.c = n, m, c
        self.lead, self.skipped = max(m - n, 0), max(n - m, 0)
        self.nc = -(-m // c)
        self.pad = self.nc * c - m

    def queries(self, t):  # (B, H, N, X) -> (B, H, nc, c, X)
        t = t[:, :, self.skipped:]
        if self.lead or self.pad:  # (no copy when the chunks tile the sequence exactly)
            t = torch.nn.functional.pad(t, (0, 0, self.lead, self.pad))
        return t.reshape(*t.shape[:2], self.nc, self.c, t.shape[-1])

    def keys(self, t):  # (B, H, M, X) -> (B, H, nc, c, X)
        if self.pad:
            t = torch.nn.functional.pad(t, (0, 0, 0, self.pad))
        return t.reshape(*t.shape[:2], self.nc, self.c, t.shape[-1])

    def output(self, o):  # (B, H, nc, c, E) -> (B, H, N, E-1) divided, and the normalisers (B, H, N)
        B, H = o.shape[:2]
        o = o.reshape(B, H, self.nc * self.c, -1)[:, :, self.lead:self.m]
        out, den = _divide(o), o[..., -1].detach()
        if self.skipped:
            out = torch.cat([out.new_zeros(B, H, self.skipped, out.shape[-1]), out], dim=2)
            den = torch.cat([den.new_zeros(B, H, self.skipped), den], dim=2)
        return out, den


def _scan(q, k, v1, log_decay, *, blind, pair=None, q_scale=None, k_scale=None):
    """The one chunked causal scan. Per chunk c (positions in chunks of size c):

        out_i = s_i · (q_i · S_{<c})  +  Σ_{j ≤ i in chunk c} (q_i · k_j) [v_j | 1]
        S_{≤c} = S_{<c} · exp(log_decay_c) + Σ_{j in chunk c} k_j (t_j [v_j | 1])ᵀ   (an (F × Dv+1) prefix sum)

    q, k: (B, H, nc, c, F); v1: (B, H, nc, c, Dv+1); log_decay: (B, H, nc) ≤ 0 or None (= 0), the log factor
    that brings the state from the previous chunk's scale to this chunk's. The states come from
    `chunk_states` (a cumulative sum, or a two-level scan with a decay), then every chunk reads its own in
    one batched product: no Python loop over chunks.
    q_scale s, k_scale t: (B, H, nc, c, 1) or None (= 1): per-position factors of the state's read and write
    (a query on the state's scale, a key on its chunk's end); scaling the (c, Dv+1) rows of the products
    instead of the (c, F) features costs Dv+1 instead of F multiplications a row. pair = (a, b), (B, H, nc, c)
    each, or None: the in-chunk weight of key j for query i is further multiplied by exp(b_j − a_i) (≤ 1 for
    j ≤ i), a scalar per pair that keeps both feature factors in range. blind: skip the in-chunk term (a query
    does not see its own chunk).
    """
    B, H, nc, c, Fq = k.shape
    written = v1 if k_scale is None else v1 * k_scale
    chunk_kv = k.transpose(-2, -1) @ written  # (B, H, nc, F, Dv+1)
    states, _ = chunk_states(chunk_kv, log_decay)  # (B, H, nc, F, Dv+1): the state before each chunk
    out = q @ states  # (B, H, nc, c, Dv+1): each chunk reads the state before its own update
    if q_scale is not None:
        out = out * q_scale
    if not blind:
        tri = torch.ones(c, c, dtype=torch.bool, device=k.device).tril()
        scores = q @ k.transpose(-2, -1)  # (B, H, nc, c, c), a fresh temporary: updated in place below
        if pair is not None:
            a, b = pair  # detached log-scales: exp(b_j − a_i) ≤ 1 on and below the diagonal, clamped above it
            scores = scores.mul_((b[..., None, :] - a[..., :, None]).clamp_(max=0.0).exp_())
        scores = scores.masked_fill_(~tri, 0.0)  # a fill, not ×0: a NaN later key stays out
        out = out + scores @ v1
    return out


def causal_linear_attention(phi_q, phi_k, v, *, chunk_size=128, k_log_scale=None, bucket_size=None):
    """Causal linear attention on given features, by chunked prefix sums (`_scan`); query i sees keys
    j ≤ i + (M − N) (bottom-right alignment).

    phi_q: (B, H, N, F)   phi_k: (B, H, M, F)   v: (B, H, M, Dv)  ->  (B, H, N, Dv)
    k_log_scale: (B, H, M) non-decreasing along M, or None (= 0): the key features are phi_k_j·exp(r_j)
    and query i's features are taken at the scale r_i of the last key it sees (see causal_key_features).
    bucket_size B > 1: query at position p sees only the keys of the buckets before its own (the bucketed
    causal variant of linear-attention-transformer); chunks are then the buckets.
    Time O(N·c·F + N·c·Dv + N·F·Dv); memory O(N·c + (N/c)·F·Dv) — never an (N, F, Dv) tensor.
    """
    return _causal(phi_q, phi_k, v, chunk_size=chunk_size, k_log_scale=k_log_scale, bucket_size=bucket_size)[0]


def _causal(phi_q, phi_k, v, *, chunk_size, k_log_scale, bucket_size):
    """causal_linear_attention, returning (out, normalisers (B, H, N))."""
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    B, H, N, Fq = phi_q.shape
    M, Dv = phi_k.shape[2], v.shape[-1]
    if N == 0 or M == 0:
        return phi_q.new_zeros(B, H, N, Dv), phi_q.new_zeros(B, H, N)
    blind = bucket_size not in (None, 1)
    ch = _Chunks(N, M, bucket_size if blind else max(1, min(chunk_size, M)))
    qc, kc, v1 = ch.queries(phi_q), ch.keys(phi_k), ch.keys(_with_ones(v))
    if k_log_scale is None:
        return ch.output(_scan(qc, kc, v1, None, blind=blind))
    r = k_log_scale.detach()
    r = torch.cummax(torch.where(torch.isfinite(r), r, torch.full_like(r, _floor(r.dtype))), dim=-1).values
    r = torch.nn.functional.pad(r, (0, ch.pad), mode="replicate").view(B, H, ch.nc, ch.c, 1)
    r_end = r[:, :, :, -1:]  # (B, H, nc, 1, 1): each chunk's keys are brought to its last key's scale
    r_before = torch.cat([r_end[:, :, :1], r_end[:, :, :-1]], dim=2)  # the state's scale (chunk 0: any)
    # ≤ 1: query i reads the state on its own scale (chunk 0 reads a zero state: any factor ≤ 1 will do, and
    # one ≤ 1 keeps a large gradient × 0 from becoming inf × 0 = NaN in the backward pass)
    q_scale = torch.exp((r_before - r).clamp(max=0.0))
    k_scale = torch.exp(r - r_end)  # ≤ 1: key j written on its chunk's end scale
    pair = (r[..., 0], r[..., 0])  # key j seen from query i ≥ j: exp(r_j − r_i) ≤ 1
    return ch.output(_scan(qc, kc, v1, (r_before - r_end)[..., 0, 0], blind=blind, pair=pair,
                           q_scale=q_scale, k_scale=k_scale))


# ---- linear attention from q, k, v --------------------------------------------------------------------------

def _compute_dtype(t):
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def _own(t, source):
    """t itself if it is a fresh temporary, else a copy: in-place shifts must never touch the caller's tensor."""
    return t.clone() if t is source else t  # the maps return either the input itself or a new tensor


def _shift(eq, c):
    """s_i = max_f (e_q,if + C_if): the exponent of query i's largest term (−inf, no visible key: 0)."""
    s = (eq + c).detach().amax(dim=-1, keepdim=True)
    return torch.where(s == float("-inf"), torch.zeros_like(s), s)


def _warn_if_underflow(den, last, mask):
    """A row that sees a key but whose normaliser is 0 lost every term to the floating-point range (its
    query's large features meet only small key features): it is 0, and we say so, never silently."""
    if den.device.type == "meta":  # shapes only (the benchmark's memory model): nothing to inspect
        return
    sees = (last >= 0)[None, :]  # (1, N)
    if mask is not None:
        seen_real = torch.cummax(mask.int(), dim=-1).values.bool()  # (B, M): a real key at or before j
        sees = sees & seen_real[:, last.clamp(min=0)]
    lost = _underflowed(den) & sees[:, None, :]
    if bool(lost.any()):
        warnings.warn(
            f"linear attention: {int(lost.sum())} output row(s) are 0 because every term of their normaliser "
            "underflowed (query and key feature exponents too far apart for the dtype); scale the inputs "
            "down or use float64", RuntimeWarning, stacklevel=3)


def linear_attention(q, k, v, *, feature_map, mask=None, causal=False, chunk_size=128, bucket_size=None):
    """Linear attention Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j) with φ = `feature_map`.

    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   mask: (B, M) bool, True = real token
    returns (B, H, N, Dv). Same mask and causal semantics as `softmax_attention`; causal uses the chunked
    scan with `chunk_size` (and `bucket_size`, for the bucketed variant).

    Exponential maps are shifted before exp as the module docstring's "Stabilisation" says (causal rows that
    underflow are 0 with a RuntimeWarning; tests/test_linear.py checks it). `linear_attention_reference` is its spec.
    """
    check_attention_inputs(q, k, v, mask)
    if not isinstance(feature_map, FeatureMap):
        raise TypeError(f"feature_map must be a minilin.linear.FeatureMap (e.g. elu_plus_one), "
                        f"got {type(feature_map).__name__}")
    if bucket_size not in (None, 1) and not causal:
        raise ValueError("bucket_size only applies to causal=True (the non-causal form sees every key); drop it")
    out_dtype, dtype = q.dtype, _compute_dtype(q)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    B, H, N, _ = q.shape
    M = k.shape[2]
    if N == 0 or M == 0:
        return q.new_zeros(B, H, N, v.shape[-1]).to(out_dtype)
    padded = None if mask is None else ~mask[:, None, :, None]  # (B, 1, M, 1)
    if not feature_map.exponential:
        fk = feature_map.key(k)
        fk = fk if padded is None else fk.masked_fill(padded, 0.0)
        fq = feature_map.query(q)
        if causal:
            out = causal_linear_attention(fq, fk, v, chunk_size=chunk_size, bucket_size=bucket_size)
        else:
            out = global_linear_attention(fq, fk, v)
        return out.to(out_dtype)
    ek = feature_map.key(k)  # (B, H, M, F) exponents
    ek = ek if padded is None else ek.masked_fill(padded, float("-inf"))  # padded keys: weight exactly 0
    eq = feature_map.query(q)  # (B, H, N, F)
    if not causal:
        ek, eq = _own(ek, k), _own(eq, q)  # the shifts below work in place on these (N, F) temporaries
        c = ek.detach().amax(dim=-2, keepdim=True)  # (B, H, 1, F) per-feature max over the keys
        c = torch.where(c == float("-inf"), torch.zeros_like(c), c)  # no real key: any finite scale
        fk = ek.sub_(c).exp_()  # ≤ 1
        eq = eq.add_(c)
        s = eq.detach().amax(dim=-1, keepdim=True)
        fq = eq.sub_(torch.where(s == float("-inf"), torch.zeros_like(s), s)).exp_()  # ≤ 1, row's largest term = 1
        return global_linear_attention(fq, fk, v).to(out_dtype)
    # causal: one running scale per key position (the largest exponent over features and positions so far),
    # carried through the scan as a log-scale, and each query on its own row max; both cancel in the ratio
    top = ek.detach().amax(dim=-1)  # (B, H, M); NaN or +inf where a key has a NaN/+inf exponent, which must
    if q.device.type != "meta" and bool((torch.isnan(top) | (top == float("inf"))).any()):  # set no scale:
        finite = torch.where(torch.isfinite(ek), ek, torch.full_like(ek, -float("inf"))).detach()
        top = finite.amax(dim=-1)  # such keys reach exactly the outputs that see them, no earlier one
    r = torch.cummax(top, dim=-1).values.clamp(min=_floor(dtype))  # (B, H, M), never the future
    fk = _own(ek, k).sub_(r[..., None]).exp_()  # ≤ 1
    row = eq.detach().amax(dim=-1, keepdim=True)
    fq = _own(eq, q).sub_(torch.where(torch.isfinite(row), row, torch.zeros_like(row))).exp_()  # ≤ 1
    out, den = _causal(fq, fk, v, chunk_size=chunk_size, k_log_scale=r, bucket_size=bucket_size)
    last = visible_counts(N, M, causal=True, bucket_size=bucket_size, device=q.device) - 1  # (N,); -1: none
    _warn_if_underflow(den, last, mask)
    return out.to(out_dtype)


def linear_attention_reference(q, k, v, *, feature_map, mask=None, causal=False):
    """The spec of `linear_attention`: the (N × M) matrix A_ij = φ(q_i)·φ(k_j), formed explicitly and masked.

    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   mask: (B, M) bool, True = real token
    returns (B, H, N, Dv): out_i = Σ_j A_ij v_j / Σ_j A_ij over the keys i may see (`allowed_keys`: padding,
    causal bottom-right), eq. 4-6 of arXiv 2006.16236 before associativity; a row with a zero normaliser
    (no visible key) is 0. φ = `feature_map.features`, unstabilised (exp overflows for large inputs): O(N·M)
    memory, for small tests and the notebooks.
    """
    check_attention_inputs(q, k, v, mask)
    a = feature_map.features(q, is_query=True) @ feature_map.features(k, is_query=False).transpose(-2, -1)
    a = torch.where(allowed_keys(q.shape[2], k.shape[2], mask=mask, causal=causal, device=q.device), a,
                    torch.zeros_like(a))  # (B, H, N, M)
    den = a.sum(-1, keepdim=True)  # (B, H, N, 1)
    return torch.where(den != 0, a @ v / torch.where(den != 0, den, torch.ones_like(den)), torch.zeros_like(den))


# ---- the recurrent form ---------------------------------------------------------------------------------

@dataclass
class LinearState:
    """Running state of causal linear attention (B, H batch dims): kv = Σ_j φ(k_j) v_jᵀ (B, H, F, Dv) and
    z = Σ_j φ(k_j) (B, H, F); for exponential maps row f is stored divided by exp(log_scale_f), log_scale
    (B, H, F) the largest key exponent on feature f so far; position = tokens consumed so far."""
    kv: torch.Tensor
    z: torch.Tensor
    log_scale: torch.Tensor
    position: int = 0


def linear_step(q_t, k_t, v_t, state=None, *, feature_map):
    """Causal linear attention as a recurrence (arXiv 2006.16236 eq. 18-20): (out_t, state) for new tokens.

    q_t, k_t: (B, H, T, D)   v_t: (B, H, T, Dv), usually T = 1, consumed one at a time:
        S += φ(k_t) v_tᵀ,  z += φ(k_t),  out_t = φ(q_t) S / φ(q_t) z
    stabilised by a running max per feature (module docstring, "Stabilisation"). O(F·Dv) memory whatever the
    length so far; running it over a sequence equals linear_attention(..., causal=True).
    """
    check_attention_inputs(q_t, k_t, v_t)
    if q_t.shape[2] != k_t.shape[2]:
        raise ValueError(f"a step consumes as many queries as keys, got {q_t.shape[2]} and {k_t.shape[2]}")
    out_dtype, dtype = q_t.dtype, _compute_dtype(q_t)
    q_t, k_t, v_t = q_t.to(dtype), k_t.to(dtype), v_t.to(dtype)
    expo = feature_map.exponential
    eq, ek = feature_map.query(q_t), feature_map.key(k_t)  # (B, H, T, F): exponents or features
    B, H, T, Fq = eq.shape
    Dv = v_t.shape[-1]
    if state is None:
        state = LinearState(kv=eq.new_zeros(B, H, Fq, Dv), z=eq.new_zeros(B, H, Fq),
                            log_scale=eq.new_full((B, H, Fq), _floor(dtype) if expo else 0.0), position=0)
    if state.kv.shape != (B, H, Fq, Dv):
        raise ValueError(f"state.kv has shape {tuple(state.kv.shape)}, expected {(B, H, Fq, Dv)}; "
                         "start a new sequence with state=None")
    kv, z, c = state.kv.to(dtype), state.z.to(dtype), state.log_scale.to(dtype)
    outs = []
    for t in range(T):
        if expo:
            c_new = torch.maximum(c, ek[:, :, t].detach())  # (B, H, F): grows or stays
            decay = torch.exp(c - c_new)  # ≤ 1: rescale each row of the old sums to its new scale
            f = torch.exp(ek[:, :, t] - c_new)  # (B, H, F) ≤ 1
            kv = kv * decay[..., None] + f[..., None] * v_t[:, :, t, None, :]  # rank-one update
            z = z * decay + f
            c = c_new
            fq = torch.exp(eq[:, :, t] + c - _shift(eq[:, :, t], c))  # ≤ 1
        else:
            kv = kv + ek[:, :, t, :, None] * v_t[:, :, t, None, :]
            z = z + ek[:, :, t]
            fq = eq[:, :, t]
        num = (fq[..., None] * kv).sum(-2)  # (B, H, Dv)
        den = (fq * z).sum(-1, keepdim=True)  # (B, H, 1)
        outs.append(_Ratio.apply(num, den))
    out = torch.stack(outs, dim=2) if outs else eq.new_zeros(B, H, 0, Dv)
    return out.to(out_dtype), LinearState(kv=kv, z=z, log_scale=c, position=state.position + T)


# ---- the module ---------------------------------------------------------------------------------------

class LinearSelfAttention(MultiHeadSelfAttention):
    """Multi-head self-attention whose mixing step is `linear_attention` with `feature_map` (default
    elu_plus_one, Katharopoulos et al. 2020). Causal models decode with `step` in O(F·Dv) memory per head.

    Subclasses (Performer, efficient attention) override the `feature_map` property. Everything after
    `heads` is keyword-only.
    """
    recurrent = True

    def __init__(self, dim, heads=8, *, feature_map=None, dim_head=None, dropout=0.0, bias=False, chunk_size=128):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias)
        if feature_map is not None and not isinstance(feature_map, FeatureMap):
            raise TypeError(f"feature_map must be a minilin.linear.FeatureMap, got {type(feature_map).__name__}")
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self._feature_map = elu_plus_one if feature_map is None else feature_map
        self.chunk_size = chunk_size

    @property
    def feature_map(self):
        return self._feature_map

    def mix(self, q, k, v, *, mask=None, causal=False):
        return linear_attention(q, k, v, feature_map=self.feature_map, mask=mask, causal=causal,
                                chunk_size=self.chunk_size)

    def step(self, x_t, state=None):
        """Causal decoding of the next token(s) x_t (B, T, dim) with an O(F·Dv) state: (y_t, state).

        Applies self.rotary(q, k, position) when set, position = tokens consumed so far. Equals
        forward(x, causal=True) position by position.
        """
        self.check_input(x_t, "x_t")
        q, k, v = self.project(x_t)  # (B, H, T, Dh)
        position = 0 if state is None else state.position
        if self.rotary is not None:
            q, k = self.rotary(q, k, position)
        out, state = linear_step(q, k, v, state, feature_map=self.feature_map)
        return self.dropout(self.to_out(self.merge_heads(out))), state
