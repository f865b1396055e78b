"""Adapters to the third-party libraries: move weights between their modules and ours, so that equality of
outputs and gradients can be asserted (float64). Each adapter names the peer class and version it targets.

Peers: `linformer` 0.2.3 (LinformerSelfAttention), `performer-pytorch` 1.1.4 (FastAttention),
`linear-attention-transformer` 0.19.1 (SelfAttention, LinearAttentionTransformer).
"""

# ---- linformer (package `linformer`) ----

# ---- performer-pytorch ----

class PerformerPytorchFAVOR:
    """performer_pytorch.FastAttention (1.1.4) driven with *our* projection matrix: call it as fn(q, k, v).

    q, k, v: (B, H, N, D) -> (B, H, N, D). Their forward runs unmodified except for two constants that
    performer-pytorch hard-codes and FAVOR+ as defined in the paper does not have, exposed here so that
    equality can be asserted: `feature_eps` (their softmax_kernel adds 1e-4 to every feature after a
    data-dependent shift, so it does not cancel) and `denominator_eps` (their causal normaliser adds 1e-6
    to the prefix sums of φ(k)). Defaults are theirs; feature_eps=0, denominator_eps=0 gives FAVOR+ exactly.
    `module` is their FastAttention instance (projection_matrix buffer = ours, same dtype as `projection`).
    Causal on a machine without fast-transformers' CUDA kernel uses their non-CUDA fallback
    (`causal_linear_attention_noncuda`), the one whose cost the notebook and the benchmark measure.
    """

    def __init__(self, projection, *, causal=False, feature_eps=1e-4, denominator_eps=1e-6):
        import contextlib
        import io

        from performer_pytorch.performer_pytorch import FastAttention
        m, d = projection.shape
        with contextlib.redirect_stdout(io.StringIO()):  # it prints a notice when the CUDA kernel is missing
            fa = FastAttention(dim_heads=d, nb_features=m, causal=causal)
        fa.projection_matrix = projection.detach().clone()  # replaces the buffer (their own draw is discarded)
        if causal:
            import functools
            fa.causal_linear_fn = functools.partial(fa.causal_linear_fn, eps=denominator_eps)
        self.module, self.causal = fa, causal
        self.feature_eps, self.denominator_eps = feature_eps, denominator_eps

    def __call__(self, q, k, v):
        import functools

        import performer_pytorch.performer_pytorch as pp
        original = pp.softmax_kernel  # FastAttention.forward looks this global up at call time
        pp.softmax_kernel = functools.partial(original, eps=self.feature_eps)
        try:
            return self.module(q, k, v)
        finally:
            pp.softmax_kernel = original

# ---- linear-attention-transformer ----
# Targets linear-attention-transformer 0.19.1. What its global heads compute (read from its source):
#   non-causal `linear_attn`: softmax(q, features) * D^-1/2 @ (softmax(k, positions)ᵀ v)  = our
#       efficient_attention times D^-1/2 (the factor is a leftover of softmax scaling; rows sum to D^-1/2);
#   causal `causal_linear_attn`: exp(k) features, buckets of `blindspot_size` positions, denominator clamped
#       at 1e-3; the D^-1/2 cancels in its ratio. Equal to efficient_attention(causal=True, bucket_size=...)
#       wherever that denominator exceeds 1e-3 (always for O(1) keys; keys below about -7 hit the clamp).

def _lat_causal_bucket(lat):
    """(causal, bucket_size) of a linear_attention_transformer 0.19.1 SelfAttention, read off its global_attn_fn."""
    import functools

    fn = lat.global_attn_fn
    if isinstance(fn, functools.partial):  # partial(causal_linear_attn, bucket_size=blindspot_size)
        bucket = fn.keywords.get("bucket_size", 1)
        return True, None if bucket in (None, 1) else bucket
    return False, None


def lat_self_attention_from_ours(ours, *, causal=False):
    """A linear_attention_transformer 0.19.1 `SelfAttention` that computes the same function as `ours`.

    ours: minilin.efficient.EfficientSelfAttention (bias=False; theirs has no q/k/v bias). Their causal flag
    is fixed at construction, ours is a forward argument: pass the one you will call ours with; ours'
    bucket_size becomes their blindspot_size. Only global heads (n_local_attn_heads=0): their local heads are
    windowed exact attention, a different kernel. Non-causal, their output before to_out is ours times D^-1/2,
    so their to_out weight is ours times √D (the bias is copied as is).
    Use: lat(x, input_mask=mask) == ours(x, mask=mask, causal=causal).
    """
    import torch
    from linear_attention_transformer.linear_attention_transformer import SelfAttention

    if ours.to_q.bias is not None:
        raise ValueError("linear-attention-transformer's SelfAttention has no q/k/v bias: build ours with bias=False")
    bucket = ours.bucket_size if causal else None
    lat = SelfAttention(ours.dim, ours.heads, causal=causal, dim_head=ours.dim_head,
                        blindspot_size=1 if bucket is None else bucket)
    lat = lat.to(dtype=ours.to_q.weight.dtype, device=ours.to_q.weight.device)
    factor = 1.0 if causal else ours.dim_head ** 0.5
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v"):
            getattr(lat, name).weight.copy_(getattr(ours, name).weight)
        lat.to_out.weight.copy_(ours.to_out.weight * factor)
        lat.to_out.bias.copy_(ours.to_out.bias)
    return lat.train(ours.training)


def ours_from_lat_self_attention(lat):
    """Our EfficientSelfAttention with the weights of a linear_attention_transformer 0.19.1 `SelfAttention`.

    Returns (ours, causal): call ours(x, mask=input_mask, causal=causal) to get lat(x, input_mask=input_mask).
    Inverse of `lat_self_attention_from_ours` (to_out weight divided by √D when non-causal).
    """
    import torch

    from minilin.efficient import EfficientSelfAttention

    if lat.local_attn_heads != 0:
        raise ValueError(f"this SelfAttention has {lat.local_attn_heads} local (windowed) heads; only global "
                         "heads are efficient attention: build it with n_local_attn_heads=0")
    if lat.receives_context:
        raise ValueError("receives_context=True is cross-attention; EfficientSelfAttention is self-attention")
    causal, bucket = _lat_causal_bucket(lat)
    dim = lat.to_q.in_features
    ours = EfficientSelfAttention(dim, heads=lat.heads, dim_head=lat.d_heads, bucket_size=bucket)
    ours = ours.to(dtype=lat.to_q.weight.dtype, device=lat.to_q.weight.device)
    _copy_lat_self_attention(lat, ours, causal)
    return ours.train(lat.training), causal


def _copy_lat_self_attention(lat, ours, causal):
    import torch

    factor = 1.0 if causal else lat.d_heads ** -0.5
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v"):
            getattr(ours, name).weight.copy_(getattr(lat, name).weight)
        ours.to_out.weight.copy_(lat.to_out.weight * factor)
        ours.to_out.bias.copy_(lat.to_out.bias)


def _copy_lat_linformer(lat, ours):
    """linformer 0.2.3 LinformerSelfAttention (inside LAT's Linformer mode) -> our LinformerSelfAttention.

    Their proj_k, proj_v are (seq_len, k) and act as einsum('bnd,nk->bkd'): our E, F (k, seq_len) are the
    transposes. Their keys are projected before the heads are split, which is the same as one E shared by
    all heads (our sharing="headwise").
    """
    import torch

    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v", "to_out"):
            getattr(ours, name).load_state_dict(getattr(lat, name).state_dict())
        ours.E.copy_(lat.proj_k.T)
        ours.F.copy_(lat.proj_v.T)


def blocks_from_lat_transformer(lat):
    """Our pre-norm Transformer blocks (minilin.model.Block) carrying a LinearAttentionTransformer's weights.

    lat: linear_attention_transformer 0.19.1 `LinearAttentionTransformer` whose layers are
    [x + attn(LayerNorm(x)), x + FeedForward(LayerNorm(x))] — exactly minilin.model.Block's order, with the same
    FeedForward (Linear(dim, 4·dim), exact GELU, Linear(4·dim, dim)). attn is either its global-head
    SelfAttention (-> our EfficientSelfAttention) or, with linformer_settings=LinformerSettings(k), the
    `linformer` package's LinformerSelfAttention (-> our LinformerSelfAttention, sharing="headwise").
    Returns (blocks, causal): `for b in blocks: x = b(x, causal=causal)` equals lat(x).
    Not supported (raises): reversible=True (a different residual stream: two halves, averaged), local
    heads, product-key memories (pkm_layers), axial or context layers, shift_tokens, blindspot_size > 1
    (TinyLM's Block builds plain-causal efficient attention).
    """
    import torch.nn as nn
    from linear_attention_transformer.linear_attention_transformer import (
        Chunk,
        FeedForward,
        PreNorm,
        SelfAttention,
    )
    from linear_attention_transformer.reversible import SequentialSequence
    from linformer import LinformerSelfAttention as TheirLinformer

    from minilin.model import Block, LMConfig

    if not isinstance(lat.layers, SequentialSequence):
        raise ValueError("reversible=True keeps two residual streams and averages them; only reversible=False "
                         "has the plain pre-norm structure of minilin.model.Block")
    pairs = list(lat.layers.layers)
    attn0 = pairs[0][0].fn
    if isinstance(attn0, SelfAttention):
        kind, causal, bucket = "efficient", *_lat_causal_bucket(attn0)
        if bucket is not None:
            raise ValueError(f"blindspot_size={bucket}: TinyLM's Block builds plain-causal efficient attention; "
                             "compare the bucketed variant at the attention layer (lat_self_attention_from_ours)")
        heads, dim_head, k = attn0.heads, attn0.d_heads, 64
    elif isinstance(attn0, TheirLinformer):
        kind, causal = "linformer", False
        heads, dim_head, k = attn0.heads, attn0.dim_head, attn0.k
    else:
        raise ValueError(f"unsupported attention layer {type(attn0).__name__} (shift_tokens=True wraps it)")
    dim = pairs[0][0].norm.normalized_shape[0]
    seq_len = attn0.seq_len if kind == "linformer" else 1
    config = LMConfig(dim=dim, depth=len(pairs), heads=heads, dim_head=dim_head, ff_mult=4, attention=kind,
                      causal=causal, block_size=seq_len, linformer_k=k, linformer_sharing="headwise")
    blocks = nn.ModuleList()
    for layer, pair in enumerate(pairs):
        if len(pair) != 2 or not all(isinstance(p, PreNorm) for p in pair):
            raise ValueError("only [PreNorm(attention), PreNorm(feed-forward)] layers are supported")
        (pre_attn, pre_ff) = pair
        ff = pre_ff.fn.fn if isinstance(pre_ff.fn, Chunk) else pre_ff.fn  # Chunk splits positions: same function
        if not isinstance(ff, FeedForward) or ff.glu:
            raise ValueError(f"layer {layer}: only the plain FeedForward is supported (no PKM, no GLU)")
        attn = pre_attn.fn
        if kind == "efficient" and (not isinstance(attn, SelfAttention) or attn.local_attn_heads):
            raise ValueError(f"layer {layer}: only global-head SelfAttention layers (n_local_attn_heads=0)")
        if kind == "linformer" and (not isinstance(attn, TheirLinformer) or attn.share_kv
                                    or attn.to_k.out_features != heads * dim_head):
            raise ValueError(f"layer {layer}: only Linformer layers with share_kv=False, one_kv_head=False")
        block = Block(config, layer).to(dtype=pre_attn.norm.weight.dtype, device=pre_attn.norm.weight.device)
        block.ln1.load_state_dict(pre_attn.norm.state_dict())
        block.ln2.load_state_dict(pre_ff.norm.state_dict())
        block.mlp.fc.load_state_dict(ff.w1.state_dict())
        block.mlp.proj.load_state_dict(ff.w2.state_dict())
        if kind == "efficient":
            _copy_lat_self_attention(attn, block.attn, causal)
        else:
            _copy_lat_linformer(attn, block.attn)
        blocks.append(block.train(lat.training))
    return blocks, causal
