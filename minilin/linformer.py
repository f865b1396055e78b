"""Linformer: project keys and values along the sequence axis to k positions, then attend exactly.

    head_i = softmax( Q W_i^Q (E_i K W_i^K)ᵀ / √d ) · F_i V W_i^V          (paper eq. 7)

E_i, F_i are (k, n) matrices: k projected "slots", each a learned mixture of the n input positions, so the
(n × n) attention matrix becomes (n × k) and time and memory grow linearly in n for a fixed k.

Shapes
    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   mask: (B, M) bool, True = real token
    E, F: (k, seq_len) shared by all heads, or (H, k, seq_len) one per head; only the first M columns are
    used, so sequences shorter than seq_len work (as in fairseq and the `linformer` package).
    returns (B, H, N, Dv)

What Linformer cannot do
    causal=True: every projected slot mixes *all* positions, future ones included, so no mask over the
    k slots can hide the future (lucidrains/linformer#4). `linformer_attention` raises instead.
    n > seq_len: E and F have seq_len columns; the layer has a fixed maximum length.

Sharing modes (paper section 4, "Additional efficiency techniques"), per layer:
    "none"       E_i, F_i per head                         2·H matrices
    "headwise"   E, F shared by all heads                  2 matrices
    "kv"         E = F shared by heads, keys and values    1 matrix
    "layerwise"  one E for every layer, head, key, value   1 matrix for the whole model (pass E=first.E)
A 12-layer 12-head model has 288 / 24 / 12 / 1 projection matrices (`projection_matrix_count`).

Projection kinds (paper section 4: "one can also choose different kinds of low-dimensional projection
methods instead of a simple linear projection ... mean/max pooling, or convolution where the kernel and
stride is set to n/k"):
    "linear"   E, F learned dense (k, seq_len) matrices (the paper's main model)
    "mean"     fixed mean pooling over k windows of seq_len/k positions (no parameters)
    "conv"     a learned strided convolution, kernel = stride = seq_len/k, shared by all channels; the
               parameters E, F are then the (seq_len/k,) kernels (one per head with sharing="none") and
               `projections(n)` expands them to (k, seq_len)-shaped matrices.

Reference: "Linformer: Self-Attention with Linear Complexity", Wang et al. 2020, arXiv 2006.04768.
"""
import math

import torch
import torch.nn as nn

from minilin.attention import MultiHeadSelfAttention, check_attention_inputs, softmax_attention

SHARING = ("none", "headwise", "kv", "layerwise")
PROJECTIONS = ("linear", "mean", "conv")
INITS = ("fan_in", "xavier", "kaiming", "jl", "peer")

CAUSAL_ERROR = (
    "Linformer cannot be causal: E and F mix all n positions, the future included, into each of the k "
    "projected keys/values, so output t would depend on tokens after t and no mask over the k slots can "
    "remove that (minilin.probes.future_leakage measures it). For autoregressive models use causal FAVOR+ "
    "(minilin.performer.favor_attention(..., causal=True)) or exact attention "
    "(minilin.attention.softmax_attention(..., causal=True)).")

POOLING_CAUSAL_ERROR = (
    "Linformer with {projection} pooling cannot be causal here: slot s pools one window of seq_len/k positions, so "
    "a query inside a window would read that window's later tokens. Masking every slot whose window ends after "
    "the query would remove the leak but also hide the query's own window (only its last position would see it; "
    "notebook 03 measures this), and this layer does not implement that mask. For autoregressive models use causal "
    "FAVOR+ (minilin.performer.favor_attention(..., causal=True)) or exact attention "
    "(minilin.attention.softmax_attention(..., causal=True)).")


def check_projection(name, P, *, heads, length, like):
    """Validate a projection E or F against q/k/v and return its first `length` columns.

    P: (k, seq_len) or (heads, k, seq_len)  ->  (k, length) or (heads, k, length)
    """
    if not isinstance(P, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (k, seq_len) or (heads, k, seq_len), "
                        f"got {type(P).__name__}")
    if P.ndim not in (2, 3):
        raise ValueError(f"{name} must have shape (k, seq_len) shared by heads, or (heads, k, seq_len) one per "
                         f"head, got {tuple(P.shape)} ({P.ndim}-D)")
    if P.ndim == 3 and P.shape[0] != heads:
        raise ValueError(f"{name} has {P.shape[0]} per-head matrices but q/k/v have {heads} heads; pass "
                         f"(heads={heads}, k, seq_len) or a single (k, seq_len) matrix shared by all heads")
    if P.shape[-1] < length:
        raise ValueError(f"the sequence has {length} positions but {name} covers only seq_len={P.shape[-1]}: "
                         f"Linformer has a fixed maximum length; build E/F (the layer) with seq_len >= {length}")
    if P.dtype != like.dtype or P.device != like.device:
        raise ValueError(f"{name} is {P.dtype} on {P.device} but q/k/v are {like.dtype} on {like.device}; "
                         f"move it with .to(q) (for a module: module.to(dtype=..., device=...))")
    return P[..., :length]  # sequences shorter than seq_len use the first columns (fairseq, lucidrains/linformer#8)


def linformer_attention(q, k, v, E, F, *, mask=None, causal=False, scale=None):
    """Linformer attention softmax(q (E k)ᵀ / √D) (F v): exact attention over k projected positions.

    q: (B, H, N, D)  k: (B, H, M, D)  v: (B, H, M, Dv)  E, F: (k, seq_len) or (H, k, seq_len), seq_len >= M
    mask: (B, M) bool, True = real token; padded keys and values are zeroed *before* the projection, so
    they contribute nothing to any slot (the `linformer` package has no mask, lucidrains/linformer#6).
    When padding or a sequence shorter than seq_len leaves a slot whose E and F weights on the real
    positions are all zero, that slot holds no token and is masked out of the softmax; hence E = F = I gives
    exact attention, masks included, and a sequence with every key padded outputs zeros (never NaN).
    returns (B, H, N, Dv). Paper eq. (7), arXiv 2006.04768. causal=True raises ValueError (see CAUSAL_ERROR).
    """
    check_attention_inputs(q, k, v, mask)
    if causal:
        raise ValueError(CAUSAL_ERROR)
    H, M = k.shape[1], k.shape[2]
    full = [P.shape[-1] if isinstance(P, torch.Tensor) else None for P in (E, F)]
    E = check_projection("E", E, heads=H, length=M, like=k)  # (k, M) or (H, k, M)
    F = check_projection("F", F, heads=H, length=M, like=v)
    if E.shape[-2] != F.shape[-2]:
        raise ValueError(f"E and F must project to the same number of slots k: E has {E.shape[-2]} rows, "
                         f"F has {F.shape[-2]}")
    if mask is not None:
        padded = ~mask[:, None, :, None]  # (B, 1, M, 1); masked_fill, not a product: NaN in padding stays out
        k, v = k.masked_fill(padded, 0.0), v.masked_fill(padded, 0.0)
    k_proj = E @ k  # (k, M) @ (B, H, M, D) -> (B, H, k, D); an (H, k, M) E broadcasts per head
    v_proj = F @ v  # (B, H, k, Dv)
    if mask is None and full == [M, M]:
        return softmax_attention(q, k_proj, v_proj, scale=scale)  # (B, H, N, Dv), an (N x k) matrix per head
    # Padding or a short sequence can leave a slot with no real position at all (E = F = I, pooling windows
    # past the end). Such a slot is a zero key with a zero value, not a token: drop it as exact attention
    # drops a padded key. Dense learned E/F rows are never all zero, so this changes nothing for them.
    real = torch.ones(k.shape[0], M, dtype=k.dtype, device=k.device) if mask is None else mask.to(k.dtype)
    mass = lambda P: torch.einsum("...jm,bm->b...j", P.detach().abs(), real)  # (B, k) or (B, H, k)
    mE, mF = mass(E), mass(F)
    if mE.ndim != mF.ndim:  # one of E, F is per head: give the shared one a head axis, (B, k) -> (B, 1, k)
        mE, mF = (m if m.ndim == 3 else m[:, None, :] for m in (mE, mF))
    slots = (mE > 0) | (mF > 0)  # (B, k) or (B, H, k)
    if slots.ndim == 2:
        return softmax_attention(q, k_proj, v_proj, mask=slots, scale=scale)  # (B, H, N, Dv)
    B, H, N = q.shape[:3]  # per-head slots: fold heads into the batch so each (b, h) has its own key mask
    fold = lambda t: t.reshape(B * H, 1, *t.shape[2:])
    out = softmax_attention(fold(q), fold(k_proj), fold(v_proj), mask=slots.reshape(B * H, -1), scale=scale)
    return out.reshape(B, H, N, -1)  # (B, H, N, Dv)


def init_projection_(P, scheme="fan_in", *, generator=None):
    """Fill a (..., k, n) projection in place; returns P. n (columns) is the fan-in: slot j sums n keys.

    The projected key (E K)_j = Σ_i E_ji K_i has Var = n·Var(E_ji)·Var(K) for independent keys, so:
      "fan_in"   N(0, 1/n)           projected keys keep the keys' scale (ratio 1, any n, k)  <- default
      "xavier"   N(0, 2/(n+k))       Glorot: ratio 2n/(n+k), between 1 and 2
      "kaiming"  N(0, 2/n)           He (ReLU gain): ratio 2
      "jl"       N(0, 1/k)           Johnson-Lindenstrauss scaling: ratio n/k, grows with n
      "peer"     U(±1/√k)            the `linformer` package's init_: ratio n/(3k)
    The notebook (03) measures these ratios and why "fan_in" is the choice: the softmax temperature of the
    projected scores then matches exact attention's at initialisation, whatever n/k is.
    """
    if scheme not in INITS:
        raise ValueError(f"unknown init {scheme!r}; choose one of {INITS}")
    k, n = P.shape[-2], P.shape[-1]
    with torch.no_grad():
        if scheme == "peer":
            bound = 1.0 / math.sqrt(k)
            u = torch.rand(P.shape, generator=generator, dtype=P.dtype, device="cpu")
            return P.copy_((2.0 * u - 1.0) * bound)
        var = {"fan_in": 1.0 / n, "xavier": 2.0 / (n + k), "kaiming": 2.0 / n, "jl": 1.0 / k}[scheme]
        z = torch.randn(P.shape, generator=generator, dtype=P.dtype, device="cpu")
        return P.copy_(z * math.sqrt(var))


def mean_pool_matrix(proj_len, seq_len, *, dtype=torch.float32, device=None):
    """(proj_len, seq_len) matrix averaging proj_len consecutive windows of seq_len/proj_len positions (pooling)."""
    if seq_len % proj_len != 0:
        raise ValueError(f"mean pooling needs seq_len divisible by proj_len, got seq_len={seq_len}, "
                         f"proj_len={proj_len}; pick proj_len among the divisors of seq_len")
    width = seq_len // proj_len
    return torch.eye(proj_len, dtype=dtype, device=device).repeat_interleave(width, dim=1) / width


def conv_matrix(kernel, proj_len):
    """Expand strided-conv kernels to projection matrices: (..., w) -> (..., k, k·w), E[j, j·w + i] = kernel[i].

    A convolution over the sequence with kernel size = stride = w, shared by all channels, is the linear map
    whose matrix is block diagonal with the kernel on each block row; this builds it differentiably.
    """
    w = kernel.shape[-1]
    eye = torch.eye(proj_len, dtype=kernel.dtype, device=kernel.device)
    blocks = torch.einsum("jl,...i->...jli", eye, kernel)  # (..., k, k, w)
    return blocks.reshape(*kernel.shape[:-1], proj_len, proj_len * w)  # (..., k, seq_len)


def projection_matrix_count(sharing, *, layers, heads):
    """How many (k, n) projection matrices a `layers`-deep, `heads`-head Linformer stores (paper sec. 4)."""
    if sharing not in SHARING:
        raise ValueError(f"unknown sharing {sharing!r}; choose one of {SHARING}")
    return {"none": 2 * layers * heads, "headwise": 2 * layers, "kv": layers, "layerwise": 1}[sharing]


def projection_parameter_count(sharing, *, layers, heads, seq_len, proj_len, projection="linear"):
    """Number of learned E/F parameters in the whole model (0 for mean pooling; kernels for conv)."""
    matrices = projection_matrix_count(sharing, layers=layers, heads=heads)
    per_matrix = {"linear": proj_len * seq_len, "mean": 0, "conv": seq_len // proj_len}[projection]
    return matrices * per_matrix


class LinformerSelfAttention(MultiHeadSelfAttention):
    """Multi-head self-attention whose mix step is `linformer_attention` with learned E, F.

    x (B, N, dim), N <= seq_len -> to_q/to_k/to_v (inherited) -> (B, H, N, dim_head) -> E/F project the N
    keys/values to proj_len slots (the paper's k) -> exact attention (B, H, N, k) -> to_out -> (B, N, dim).
    sharing: "none" | "headwise" | "kv" | "layerwise" (see module docstring). For "layerwise" build the first
    layer with E=None and pass E=first.E to the others: the same nn.Parameter is then registered in every
    layer (and counted once by model.parameters()).
    projection: "linear" | "mean" | "conv". init: see `init_projection_` (default "fan_in", N(0, 1/seq_len)).
    Parameters are named E and (unless shared) F, so an optimizer group can select them by name.
    """

    def __init__(self, dim, heads=8, *, seq_len=512, proj_len=64, sharing="headwise", dim_head=None, dropout=0.0,
                 projection="linear", E=None, bias=False, init="fan_in", generator=None):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias)
        if sharing not in SHARING:
            raise ValueError(f"unknown sharing {sharing!r}; choose one of {SHARING}")
        if projection not in PROJECTIONS:
            raise ValueError(f"unknown projection {projection!r}; choose one of {PROJECTIONS}")
        if not (isinstance(proj_len, int) and isinstance(seq_len, int) and 1 <= proj_len and 1 <= seq_len):
            raise ValueError(f"proj_len and seq_len must be positive ints, got proj_len={proj_len!r}, "
                             f"seq_len={seq_len!r}")
        if projection in ("mean", "conv") and seq_len % proj_len != 0:
            raise ValueError(f"projection={projection!r} uses windows of seq_len/proj_len positions, so seq_len "
                             f"must be divisible by proj_len; got seq_len={seq_len}, proj_len={proj_len}")
        if E is not None and sharing != "layerwise":
            raise ValueError(f"E is passed in only for sharing='layerwise' (one E for every layer); got "
                             f"sharing={sharing!r}. Drop E, or use sharing='layerwise'")
        self.seq_len, self.proj_len, self.sharing, self.projection = seq_len, proj_len, sharing, projection
        k = proj_len  # the paper's letter, inside this constructor only
        if projection == "mean":
            if E is not None:
                raise ValueError("projection='mean' has no learned E to share; drop E")
            self.register_buffer("E", mean_pool_matrix(k, seq_len), persistent=False)  # fixed, not learned
            self.F = None
            return
        width = seq_len // k
        shape = {"linear": (k, seq_len), "conv": (width,)}[projection]
        if sharing == "none":
            shape = (heads, *shape)

        def fresh():
            P = torch.empty(shape)
            if projection == "linear":
                return nn.Parameter(init_projection_(P, init, generator=generator))
            # a conv kernel sums `width` positions: N(0, 1/width) keeps the scale, as "fan_in" does
            return nn.Parameter(P.copy_(torch.randn(shape, generator=generator) / math.sqrt(width)))

        if E is not None:
            if not isinstance(E, nn.Parameter) or tuple(E.shape) != shape:
                got = tuple(E.shape) if isinstance(E, torch.Tensor) else type(E).__name__
                raise ValueError(f"the shared E must be an nn.Parameter of shape {shape} (take it from the first "
                                 f"layer: E=first_layer.E), got {got}")
            self.E = E
        else:
            self.E = fresh()
        self.F = fresh() if sharing in ("none", "headwise") else None  # "kv"/"layerwise": F = E

    def projections(self, n):
        """The (E, F) matrices used for a length-n input: (k, n) each, or (H, k, n) with sharing="none"."""
        if n > self.seq_len:
            raise ValueError(f"sequence length {n} exceeds this Linformer's seq_len={self.seq_len}: E and F have "
                             f"seq_len columns. Build the layer with seq_len >= {n} (or crop the input)")
        E = self.E
        F = E if self.F is None else self.F
        if self.projection == "conv":
            E, F = conv_matrix(E, self.proj_len), conv_matrix(F, self.proj_len)
        return E[..., :n], F[..., :n]

    def mix(self, q, k, v, *, mask=None, causal=False):
        if causal:   # a dense E mixes every position into every slot; pooling mixes one window into each slot
            raise ValueError(CAUSAL_ERROR if self.projection == "linear"
                             else POOLING_CAUSAL_ERROR.format(projection=self.projection))
        E, F = self.projections(k.shape[2])
        if self.projection == "mean":
            E = F = E.to(k)  # a fixed buffer: follow the input's dtype/device
        return linformer_attention(q, k, v, E, F, mask=mask)

    def extra_repr(self):
        return f"seq_len={self.seq_len}, proj_len={self.proj_len}, sharing={self.sharing!r}, projection={self.projection!r}"
