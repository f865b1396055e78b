"""Exact softmax attention: the reference every other variant in minilin is compared against.

Shapes (used everywhere in the package)
    q: (B, H, N, D)      B batch, H heads, N queries, D head dim
    k: (B, H, M, D)      M keys
    v: (B, H, M, Dv)     Dv may differ from D
    returns (B, H, N, Dv)

The mask convention (documented once, here, and used by every variant)
    mask: (B, M) bool, True = a real token that may be attended to, False = padding.
    It is a *key padding* mask: it removes keys/values, never queries. Padded query rows still get an
    output (computed from the real keys); callers drop them if they want.

The causal flag
    causal=True lets query i see key j only when j <= i + (M - N): queries are aligned with the *last*
    N keys ("bottom-right"), which is what decoding with a cache needs. With N == M this is the usual
    lower-triangular mask and matches `F.scaled_dot_product_attention(..., is_causal=True)`; with N != M,
    PyTorch's `is_causal` aligns top-left instead, and `torch.nn.attention.bias.causal_lower_right(N, M)` is
    the bottom-right mask that matches.

Fully-masked rows
    A query that may see no key at all (every key padded, or causal + left padding) gets an all-zero
    row of probabilities and an all-zero output. It never produces NaN, and its gradient is zero.

Reference: "Attention Is All You Need", Vaswani et al. 2017, arXiv 1706.03762, eq. (1).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as functional


def check_attention_inputs(q, k, v, mask=None):
    """Validate the shared shape contract; raise a ValueError that says how to fix the call."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 4:
            raise ValueError(
                f"{name} must have shape (batch, heads, seq, head_dim), got {tuple(t.shape)} "
                f"({t.ndim}-D); split heads first, e.g. x.view(B, N, H, D).transpose(1, 2)")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}; call .float()")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(
            f"q, k, v must agree on (batch, heads): got q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share head_dim: q has {q.shape[-1]}, k has {k.shape[-1]}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"k and v must have the same number of positions: k has {k.shape[2]}, v has {v.shape[2]}")
    if mask is not None:
        check_mask(mask, batch=k.shape[0], length=k.shape[2])


def check_mask(mask, batch, length):
    """A key padding mask must be a (B, M) bool tensor, True = real token."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be a bool tensor (True = real token), got dtype {mask.dtype}; "
            f"use mask.bool() or (lengths[:, None] > torch.arange(M)) to build one")
    if tuple(mask.shape) != (batch, length):
        raise ValueError(
            f"mask must have shape (batch, seq) = ({batch}, {length}) with True = real token, "
            f"got {tuple(mask.shape)}")


def allowed_keys(n, m, *, mask=None, causal=False, device=None):
    """Boolean (B|1, 1, N, M) tensor: may query i see key j? Combines padding mask and causal mask."""
    allowed = torch.ones(1, 1, n, m, dtype=torch.bool, device=device)
    if causal:
        i = torch.arange(n, device=device)[:, None]
        j = torch.arange(m, device=device)[None, :]
        allowed = allowed & (j <= i + (m - n))  # bottom-right aligned, see module docstring
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return allowed


def attention_matrix(q, k, *, mask=None, causal=False, scale=None):
    """The (B, H, N, M) attention probabilities softmax(q kᵀ · scale), masked; rows with no key are 0."""
    check_attention_inputs(q, k, k, mask)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, N, M)
    if scores.numel() == 0:  # no query or no key: the (empty, or all-zero) matrix
        return scores.new_zeros(scores.shape)
    if mask is None and not causal:
        return torch.softmax(scores, dim=-1)
    allowed = allowed_keys(q.shape[2], k.shape[2], mask=mask, causal=causal, device=q.device)
    scores = scores.masked_fill(~allowed, float("-inf"))  # a hidden key is -inf whatever it held (NaN too)
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)  # NaN stays NaN
    p = torch.exp(scores - row_max.detach())  # stable: the subtracted max cancels in p / sum(p)
    denom = p.sum(dim=-1, keepdim=True)
    return p / torch.where(denom > 0, denom, torch.ones_like(denom))  # empty rows stay 0, not NaN


def softmax_attention(q, k, v, *, mask=None, causal=False, scale=None):
    """Exact scaled dot-product attention, softmax(q kᵀ / √D) v.

    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   mask: (B, M) bool, True = real token
    returns (B, H, N, Dv). Mask, causal and fully-masked-row semantics: see the module docstring.
    """
    check_attention_inputs(q, k, v, mask)
    return attention_matrix(q, k, mask=mask, causal=causal, scale=scale) @ v  # (B, H, N, Dv)


def attention_loops(q, k, v, *, mask=None, causal=False, scale=None):
    """The readable specification: plain Python loops over batch, head, query and key.

    Same contract as `softmax_attention`; slow (O(B·H·N·M) Python steps), for small tests only.
    """
    check_attention_inputs(q, k, v, mask)
    B, H, N, D = q.shape
    M = k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    rows = []
    for b in range(B):
        for h in range(H):
            for i in range(N):
                visible = [j for j in range(M)
                           if (mask is None or bool(mask[b, j])) and (not causal or j <= i + M - N)]
                out_i = torch.zeros(v.shape[-1], dtype=v.dtype, device=v.device)
                if visible:  # a query that sees no key outputs zeros
                    scores = [(q[b, h, i] * k[b, h, j]).sum() * scale for j in visible]
                    top = max(s.detach() for s in scores)  # a constant: it cancels in w / total
                    weights = [torch.exp(s - top) for s in scores]
                    total = sum(weights)
                    for w, j in zip(weights, visible):
                        out_i = out_i + (w / total) * v[b, h, j]
                rows.append(out_i)
    out = torch.stack(rows).view(B, H, N, v.shape[-1])
    return out


def sdpa_attention(q, k, v, *, mask=None, causal=False):
    """Exact attention through F.scaled_dot_product_attention (fused kernels), minilin's mask semantics.

    q: (B, H, N, D)   k, v: (B, H, M, D)   mask: (B, M) bool True = real  ->  (B, H, N, D)
    Bottom-right causal alignment when N != M and zeros (not NaN) for queries that see no key, as in
    softmax_attention; the fast path (is_causal / no mask) is taken whenever it means the same thing.
    """
    check_attention_inputs(q, k, v, mask)
    n, m = q.shape[2], k.shape[2]
    if n == 0 or m == 0:
        return q.new_zeros(*q.shape[:3], v.shape[-1])
    if mask is None and (not causal or n == m):
        return functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    allowed = allowed_keys(n, m, mask=mask, causal=causal, device=q.device)  # (B|1, 1, N, M)
    empty = ~allowed.any(dim=-1, keepdim=True)  # (B|1, 1, N, 1) queries with no visible key
    out = functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed | empty)  # empty rows: any value
    return out.masked_fill(empty, 0.0)  # ... then zeros, with zero gradient


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention; subclasses change only the mixing step.

    x (B, N, dim) -> to_q/to_k/to_v -> (B, H, N, dim_head) -> mix(q, k, v) -> to_out -> (B, N, dim).
    The one extension point is `mix(q, k, v, *, mask, causal)` (default: exact attention): Linformer,
    Performer, linear and efficient attention override it and reuse the same projections, so weights move
    between variants by `load_state_dict(..., strict=False)`. Everything after `heads` is keyword-only.
    `dropout` is applied to the block's output (after `to_out`).
    `rotary`: optional callable (q, k, offset) -> (q, k) applied to the split heads before mixing (the LM
    sets it for rotary position embeddings; `offset` is the position of the first token, for decoding).

    Recurrent decoding: `step(x_t, state) -> (y_t, state)` consumes the next token(s) x_t (B, T, dim) of a
    causal sequence (state=None starts one) and equals `forward(x, causal=True)` position by position.
    `recurrent` says whether a variant has it; the base class raises NotImplementedError naming the fix.
    """
    recurrent = False

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False):
        super().__init__()
        if not isinstance(heads, int) or heads < 1:
            raise ValueError(f"heads must be a positive int, got {heads!r}")
        if dim_head is None:
            if dim % heads != 0:
                raise ValueError(f"dim={dim} is not divisible by heads={heads}; pass dim_head explicitly")
            dim_head = dim // heads
        self.dim, self.heads, self.dim_head = dim, heads, dim_head
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner, bias=bias)
        self.to_k = nn.Linear(dim, inner, bias=bias)
        self.to_v = nn.Linear(dim, inner, bias=bias)
        self.to_out = nn.Linear(inner, dim)
        self.dropout = nn.Dropout(dropout)
        self.rotary = None

    def split_heads(self, t):
        B, N, _ = t.shape
        return t.view(B, N, self.heads, self.dim_head).transpose(1, 2)  # (B, H, N, Dh)

    def merge_heads(self, t):
        B, H, N, Dh = t.shape
        return t.transpose(1, 2).reshape(B, N, H * Dh)  # (B, N, H*Dh)

    def mix(self, q, k, v, *, mask=None, causal=False):
        return softmax_attention(q, k, v, mask=mask, causal=causal)

    def check_input(self, x, name="x"):
        """x must be (batch, seq, dim) in the weights' floating dtype: say so in our words, not F.linear's."""
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[-1] != self.dim:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must have shape (batch, seq, {self.dim}), got {got}")
        weight = self.to_q.weight
        if x.dtype != weight.dtype:
            raise ValueError(f"{name} is {x.dtype} but the module's weights are {weight.dtype}; convert the "
                             f"input ({name}.to({weight.dtype})) or the module (module.to({x.dtype}))"
                             if x.is_floating_point() else
                             f"{name} must be a floating-point tensor like the weights ({weight.dtype}), got "
                             f"{x.dtype}; token ids go through an nn.Embedding first")

    def project(self, x):
        q, k, v = (self.split_heads(f(x)) for f in (self.to_q, self.to_k, self.to_v))  # (B, H, N, Dh)
        return q, k, v

    def forward(self, x, *, mask=None, causal=False):
        self.check_input(x)
        q, k, v = self.project(x)
        if self.rotary is not None:
            q, k = self.rotary(q, k, 0)
        out = self.mix(q, k, v, mask=mask, causal=causal)  # (B, H, N, Dh)
        return self.dropout(self.to_out(self.merge_heads(out)))

    def step(self, x_t, state=None):
        raise NotImplementedError(
            f"{type(self).__name__} has no recurrent one-token form; decode by re-running forward(x, "
            "causal=True) on the prefix, or use exact, sdpa, performer, linear or efficient attention")


class ExactSelfAttention(MultiHeadSelfAttention):
    """Exact (sdpa=False: `softmax_attention`; sdpa=True: `sdpa_attention`) self-attention, with `step` for
    decoding one token at a time with a key/value cache (memory O(t), unlike linear attention's O(1) state).
    """
    recurrent = True

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, sdpa=False):
        super().__init__(dim, heads, dim_head=dim_head, dropout=dropout, bias=bias)
        self.sdpa = sdpa

    def mix(self, q, k, v, *, mask=None, causal=False):
        fn = sdpa_attention if self.sdpa else softmax_attention
        return fn(q, k, v, mask=mask, causal=causal)

    def step(self, x_t, state=None):
        self.check_input(x_t, "x_t")
        q, k, v = self.project(x_t)  # (B, H, T, Dh)
        position = 0 if state is None else state["k"].shape[2]
        if self.rotary is not None:
            q, k = self.rotary(q, k, position)
        if state is not None:
            k, v = torch.cat([state["k"], k], dim=2), torch.cat([state["v"], v], dim=2)  # (B, H, t, Dh)
        out = self.mix(q, k, v, causal=True)  # bottom-right: the T new queries see the cache and the past
        return self.dropout(self.to_out(self.merge_heads(out))), {"k": k, "v": v}
