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
    PyTorch's `is_causal` aligns top-left instead, so we do not compare the two there.

Fully-masked rows
    A query that may see no key at all (every key padded, or causal + left padding) gets an all-zero
    row of probabilities and an all-zero output. It never produces NaN, and its gradient is zero.

Reference: "Attention Is All You Need", Vaswani et al. 2017, arXiv 1706.03762, eq. (1).
"""
import math

import torch
import torch.nn as nn


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
    if mask is None and not causal:
        return torch.softmax(scores, dim=-1)
    allowed = allowed_keys(q.shape[2], k.shape[2], mask=mask, causal=causal, device=q.device)
    scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
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


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with a pluggable mixing step.

    x (B, N, dim) -> to_q/to_k/to_v -> (B, H, N, dim_head) -> mix(q, k, v) -> to_out -> (B, N, dim).
    `mixer` is any callable with the `softmax_attention` signature (default: exact attention). Linformer,
    Performer and the other variants subclass this and override `mix`, so they reuse the same projections
    (and weights can be moved between variants by `load_state_dict(..., strict=False)`).
    `dropout` is applied to the block's output (after `to_out`).
    `rotary`: optional callable (q, k, offset) -> (q, k) applied to the split heads before mixing (the LM
    sets it for rotary position embeddings; `offset` is the position of the first token, for decoding).
    """

    def __init__(self, dim, heads=8, dim_head=None, dropout=0.0, mixer=None, bias=False):
        super().__init__()
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
        self.mixer = softmax_attention if mixer is None else mixer
        self.rotary = None

    def split_heads(self, t):
        B, N, _ = t.shape
        return t.view(B, N, self.heads, self.dim_head).transpose(1, 2)  # (B, H, N, Dh)

    def merge_heads(self, t):
        B, H, N, Dh = t.shape
        return t.transpose(1, 2).reshape(B, N, H * Dh)  # (B, N, H*Dh)

    def mix(self, q, k, v, *, mask=None, causal=False):
        return self.mixer(q, k, v, mask=mask, causal=causal)

    def forward(self, x, *, mask=None, causal=False):
        if x.ndim != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (batch, seq, {self.dim}), got {tuple(x.shape)}")
        q, k, v = (self.split_heads(f(x)) for f in (self.to_q, self.to_k, self.to_v))
        if self.rotary is not None:
            q, k = self.rotary(q, k, 0)
        out = self.mix(q, k, v, mask=mask, causal=causal)  # (B, H, N, Dh)
        return self.dropout(self.to_out(self.merge_heads(out)))
