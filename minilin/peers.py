"""Adapters to the third-party libraries: move weights between their modules and ours, so that equality of
outputs and gradients can be asserted (float64). Each adapter names the peer class and version it targets.

Peers: `linformer` 0.2.3 (LinformerSelfAttention), `performer-pytorch` 1.1.4 (FastAttention),
`linear-attention-transformer` 0.19.1 (SelfAttention, LinearAttentionTransformer).
"""

# ---- linformer (package `linformer`) ----

def _linformer_layout_check(ours):
    """Refuse, with the reason, the configurations of our layer that linformer 0.2.3 cannot express."""
    import torch
    if ours.projection != "linear":
        raise ValueError(f"the `linformer` package only has linear E/F; got projection={ours.projection!r}")
    if ours.sharing == "none":
        raise ValueError("the `linformer` package shares one E, F across heads; sharing='none' (per-head E_i) "
                         "has no counterpart there. Use sharing='headwise', 'kv' or 'layerwise'")
    if any(lin.bias is not None for lin in (ours.to_q, ours.to_k, ours.to_v)):
        raise ValueError("the `linformer` package's to_q/to_k/to_v have no bias; build ours with bias=False")
    shared = ours.sharing in ("kv", "layerwise")
    if shared and not torch.equal(ours.to_k.weight, ours.to_v.weight):
        raise ValueError("with share_kv=True the `linformer` package uses the keys as values (values = to_k(x), "
                         "one projection for E and F *and* for to_k/to_v); copy to_k.weight into to_v.weight "
                         "first, or use sharing='headwise'")
    return shared


def linformer_to_peer(ours):
    """A `linformer.LinformerSelfAttention` (0.2.3) holding the weights of our `LinformerSelfAttention`.

    sharing "kv"/"layerwise" maps to share_kv=True, which in the peer also makes the values equal the keys
    (no to_v): ours must then have to_v.weight == to_k.weight.
    Same dtype and device as ours. Their dropout acts on the attention probabilities, ours on the block's
    output; compare in eval mode or with dropout=0. The peer has no mask and no causal flag.
    """
    import torch

    from linformer import LinformerSelfAttention as Peer
    shared = _linformer_layout_check(ours)
    w = ours.to_q.weight
    with torch.random.fork_rng(devices=[]):  # the peer's constructor draws its own init; keep the caller's RNG
        peer = Peer(ours.dim, ours.seq_len, k=ours.proj_len, heads=ours.heads, dim_head=ours.dim_head, share_kv=shared)
    peer = peer.to(dtype=w.dtype, device=w.device)
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_out"):
            getattr(peer, name).load_state_dict(getattr(ours, name).state_dict())
        peer.proj_k.copy_(ours.E.T)  # (seq_len, k)
        if not shared:
            peer.to_v.load_state_dict(ours.to_v.state_dict())
            peer.proj_v.copy_(ours.F.T)
    return peer


def linformer_from_peer(peer, **kwargs):
    """Our `LinformerSelfAttention` holding the weights of a `linformer.LinformerSelfAttention` (0.2.3).

    share_kv=False -> sharing="headwise"; share_kv=True -> sharing="kv" with to_v = a copy of to_k (the
    peer computes values with to_k). one_kv_head=True (one key/value head for all query heads) has no
    counterpart in minilin and is refused. kwargs go to our constructor (e.g. dropout). Same dtype/device.
    """
    import torch

    from minilin.linformer import LinformerSelfAttention
    heads, dim_head = peer.heads, peer.dim_head
    if peer.to_k.out_features != heads * dim_head:
        raise ValueError("one_kv_head=True (a single key/value head shared by all query heads) has no "
                         "counterpart in minilin's LinformerSelfAttention; build the peer with one_kv_head=False")
    w = peer.to_q.weight
    sharing = "kv" if peer.share_kv else "headwise"
    with torch.random.fork_rng(devices=[]):
        ours = LinformerSelfAttention(peer.to_q.in_features, heads=heads, seq_len=peer.seq_len, proj_len=peer.k,
                                      sharing=sharing, dim_head=dim_head, **kwargs)
    ours = ours.to(dtype=w.dtype, device=w.device)
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_out"):
            getattr(ours, name).load_state_dict(getattr(peer, name).state_dict())
        ours.E.copy_(peer.proj_k.T)  # (k, seq_len)
        if peer.share_kv:
            ours.to_v.weight.copy_(peer.to_k.weight)
        else:
            ours.to_v.load_state_dict(peer.to_v.state_dict())
            ours.F.copy_(peer.proj_v.T)
    return ours


def linformer_grads_in_peer_layout(ours):
    """Our parameters' .grad rearranged as the peer's parameters: {peer name: tensor}.

    E.grad and F.grad go to proj_k and proj_v in the peer's layout; under share_kv the peer's to_k serves as
    keys and values, so its gradient is the sum of our to_k and to_v gradients (ours are two tied-at-start
    copies).
    """
    shared = ours.sharing in ("kv", "layerwise")
    grads = {"to_q.weight": ours.to_q.weight.grad, "to_out.weight": ours.to_out.weight.grad,
             "to_out.bias": ours.to_out.bias.grad, "proj_k": ours.E.grad.T}
    if shared:
        grads["to_k.weight"] = ours.to_k.weight.grad + ours.to_v.weight.grad
    else:
        grads.update({"to_k.weight": ours.to_k.weight.grad, "to_v.weight": ours.to_v.weight.grad,
                      "proj_v": ours.F.grad.T})
    return grads

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
        with performer_eps(self.feature_eps):
            return self.module(q, k, v)


def performer_eps(eps):
    """A context in which performer-pytorch 1.1.4's softmax_kernel adds `eps` to every feature (as shipped: 1e-4).

    Their ε is a default argument of `performer_pytorch.performer_pytorch.softmax_kernel`, bound when it was
    defined; their FastAttention.forward looks up the module-global name `softmax_kernel` at each call, so inside
    the block that name is one with eps=eps, and on leaving it (an exception included) theirs is back. eps=0 gives FAVOR+'s features as the paper defines them.
    Use: `with performer_eps(0.0): out = their_layer(x)`.
    """
    import functools
    import unittest.mock

    import performer_pytorch.performer_pytorch as pp
    return unittest.mock.patch.object(pp, "softmax_kernel", functools.partial(pp.softmax_kernel, eps=eps))


# our PerformerSelfAttention's tensor -> their SelfAttention's tensor (every tensor of theirs, once)
PERFORMER_SELF_ATTENTION_NAMES = {"to_q.weight": "to_q.weight", "to_k.weight": "to_k.weight",
                                  "to_v.weight": "to_v.weight", "to_out.weight": "to_out.weight",
                                  "to_out.bias": "to_out.bias", "projection": "fast_attention.projection_matrix"}


class PerformerPytorchSelfAttention:
    """performer-pytorch 1.1.4's `SelfAttention` carrying our `PerformerSelfAttention`'s weights: call it as fn(x).

    x: (B, N, dim) -> (B, N, dim). Built by `performer_self_attention_to_peer`. Their forward runs unmodified
    except for `feature_eps`, the constant their softmax_kernel adds to every feature (1e-4 as shipped; 0 gives
    FAVOR+ as the paper defines it). `module` is their layer; `param_pairs` maps our parameters to its own, for
    `compare_with_peer`.
    """

    def __init__(self, module, param_pairs, feature_eps):
        self.module, self.param_pairs, self.feature_eps = module, param_pairs, feature_eps

    def __call__(self, x, **kwargs):
        with performer_eps(self.feature_eps):
            return self.module(x, **kwargs)


def performer_self_attention_to_peer(ours, *, feature_eps=1e-4):
    """performer-pytorch 1.1.4's `SelfAttention` (non-causal, global heads) holding `ours`' weights.

    ours: minilin.performer.PerformerSelfAttention with positive features and bias=False (their to_q, to_k,
    to_v have no bias). to_q, to_k, to_v, to_out map by name and our `projection` buffer (m, dim_head) becomes
    their projection_matrix (PERFORMER_SELF_ATTENTION_NAMES); the load is strict, so a tensor of theirs left
    unset raises. Same dtype and device as ours. Returns a PerformerPytorchSelfAttention:
    `compare_with_peer(ours, theirs, [x], param_pairs=theirs.param_pairs)` tests the transplant.
    """
    import contextlib
    import io

    import torch
    from performer_pytorch.performer_pytorch import SelfAttention

    if ours.kernel != "positive":
        raise ValueError(f"performer-pytorch's softmax_kernel is FAVOR+'s positive map; got kernel={ours.kernel!r}")
    if ours.to_q.bias is not None:
        raise ValueError("performer-pytorch's SelfAttention has no q/k/v bias: build ours with bias=False")
    with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(io.StringIO()):  # its init draws and prints
        peer = SelfAttention(dim=ours.dim, heads=ours.heads, dim_head=ours.dim_head, nb_features=ours.nb_features)
    peer = peer.to(dtype=ours.projection.dtype, device=ours.projection.device).train(ours.training)
    mine = ours.state_dict()
    peer.load_state_dict({theirs: mine[name] for name, theirs in PERFORMER_SELF_ATTENTION_NAMES.items()})
    same = lambda t: t  # noqa: E731  the weights are copied unchanged, so are their gradients
    ours_params, their_params = dict(ours.named_parameters()), dict(peer.named_parameters())
    pairs = [(ours_params[name], their_params[theirs], same, same)
             for name, theirs in PERFORMER_SELF_ATTENTION_NAMES.items() if name in ours_params]
    if len(pairs) != len(their_params):
        raise ValueError(f"their learnable tensors {sorted(their_params)} are not all paired with ours")
    return PerformerPytorchSelfAttention(peer, pairs, feature_eps)

# ---- linear-attention-transformer ----
# Targets linear-attention-transformer 0.19.1. What its global heads compute (read from its source):
#   non-causal `linear_attn`: softmax(q, features) * D^-1/2 @ (softmax(k, positions)ᵀ v)  = our
#       efficient_attention times D^-1/2 (the factor is a leftover of softmax scaling; rows sum to D^-1/2);
#   causal `causal_linear_attn`: exp(k) features, buckets of `blindspot_size` positions, denominator clamped
#       at 1e-3; the D^-1/2 cancels in its ratio. Equal to efficient_attention(causal=True, bucket_size=...)
#       wherever that denominator exceeds 1e-3 (always for O(1) keys; very negative keys, e^k ~ 1e-3, hit it).

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
    windowed exact attention, a different kernel.
    Use: lat(x, input_mask=mask) == ours(x, mask=mask, causal=causal).
    """
    import torch
    from linear_attention_transformer.linear_attention_transformer import SelfAttention

    if ours.to_q.bias is not None:
        raise ValueError("linear-attention-transformer's SelfAttention has no q/k/v bias: build ours with bias=False")
    bucket = ours.bucket_size if causal else None
    with torch.random.fork_rng(devices=[]):  # its init draws from the global RNG; leave the caller's alone
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
    Inverse of `lat_self_attention_from_ours`.
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
    with torch.random.fork_rng(devices=[]):
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
    import torch
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
                      causal=causal, block_size=seq_len, proj_len=k, linformer_sharing="headwise")
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
        with torch.random.fork_rng(devices=[]):
            block = Block(config, layer).to(dtype=pre_attn.norm.weight.dtype, device=pre_attn.norm.weight.device)
        block.ln1.load_state_dict(pre_attn.norm.state_dict())
        block.ln2.load_state_dict(pre_ff.norm.state_dict())
        block.mlp.fc.load_state_dict(ff.w1.state_dict())
        block.mlp.proj.load_state_dict(ff.w2.state_dict())
        if kind == "efficient":
            _copy_lat_self_attention(attn, block.attn, causal)
        else:  # the `linformer` package's own layer: its adapter (section above) maps proj_k, proj_v to E, F
            block.attn = linformer_from_peer(attn)
        blocks.append(block.train(lat.training))
    return blocks, causal


def lat_param_pairs(ours, lat, *, causal):
    """(our parameter, their parameter, map) for a transplanted pair of attention layers or block stacks.

    ours/lat: EfficientSelfAttention / linear_attention_transformer 0.19.1 SelfAttention, or the ModuleList of
    minilin.model.Block returned by `blocks_from_lat_transformer` / their LinearAttentionTransformer.
    `map` turns their parameter into ours: identity, a rearrangement or a rescaling. Gradients follow the
    inverse of the value map: use `grad_map` for gradients.
    """
    import torch.nn as nn
    from linear_attention_transformer.linear_attention_transformer import SelfAttention

    def same(t):
        return t

    def transpose(t):
        return t.T

    if isinstance(lat, SelfAttention):
        root = lat.d_heads ** 0.5
        out = same if causal else (lambda t: t / root)
        out_grad = same if causal else (lambda t: t * root)
        pairs = [(getattr(ours, n).weight, getattr(lat, n).weight, same, same) for n in ("to_q", "to_k", "to_v")]
        pairs.append((ours.to_out.weight, lat.to_out.weight, out, out_grad))
        pairs.append((ours.to_out.bias, lat.to_out.bias, same, same))
        return pairs
    if not isinstance(ours, nn.ModuleList):
        raise TypeError("pass an EfficientSelfAttention and a SelfAttention, or the blocks returned by "
                        "blocks_from_lat_transformer and their LinearAttentionTransformer")
    pairs = []
    for block, (pre_attn, pre_ff) in zip(ours, lat.layers.layers):
        ff = getattr(pre_ff.fn, "fn", pre_ff.fn)
        for mine, theirs in ((block.ln1, pre_attn.norm), (block.ln2, pre_ff.norm), (block.mlp.fc, ff.w1),
                             (block.mlp.proj, ff.w2)):
            pairs += [(mine.weight, theirs.weight, same, same), (mine.bias, theirs.bias, same, same)]
        attn = pre_attn.fn
        if isinstance(attn, SelfAttention):
            pairs += lat_param_pairs(block.attn, attn, causal=causal)
        else:  # the `linformer` package's LinformerSelfAttention
            pairs += [(getattr(block.attn, n).weight, getattr(attn, n).weight, same, same)
                      for n in ("to_q", "to_k", "to_v", "to_out")]
            pairs += [(block.attn.to_out.bias, attn.to_out.bias, same, same),
                      (block.attn.E, attn.proj_k, transpose, transpose),
                      (block.attn.F, attn.proj_v, transpose, transpose)]
    return pairs


def compare_with_peer(ours, theirs, inputs, *, param_pairs=(), seed=0):
    """Largest absolute differences between two implementations of one function: outputs and gradients.

    ours, theirs: callables taking *inputs (float64 tensors, cloned per side). param_pairs: (our parameter,
    their parameter, value map, grad map) as from `lat_param_pairs` (their gradient mapped by grad map is
    compared with ours). The gradients are those of <w, out> for one random cotangent w (from `seed`), so no
    dependence cancels by symmetry. Returns {"output", "input_grad", "weight_grad"} (weight_grad NaN when no
    pairs). Parameters' .grad are not touched (torch.autograd.grad).
    """
    import torch

    ins = [[t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs] for _ in range(2)]
    outs = [ours(*ins[0]), theirs(*ins[1])]
    if outs[0].shape != outs[1].shape:
        raise ValueError(f"the outputs differ in shape: ours {tuple(outs[0].shape)}, theirs {tuple(outs[1].shape)}")
    w = torch.randn(outs[0].shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    w = w.to(dtype=outs[0].dtype, device=outs[0].device)
    grads = []
    for side, (out, xs) in enumerate(zip(outs, ins)):
        params = [pair[side] for pair in param_pairs]
        grads.append(torch.autograd.grad((out * w).sum(), [x for x in xs if x.requires_grad] + params))
    n_in = sum(x.requires_grad for x in ins[0])

    def gap(pairs):
        return max(((a - b).abs().max().item() for a, b in pairs), default=float("nan"))

    return {"output": gap([(outs[0], outs[1])]),
            "input_grad": gap(zip(grads[0][:n_in], grads[1][:n_in])),
            "weight_grad": gap((g_ours, grad_map(g_theirs)) for g_ours, g_theirs, (_, _, _, grad_map)
                               in zip(grads[0][n_in:], grads[1][n_in:], param_pairs))}
