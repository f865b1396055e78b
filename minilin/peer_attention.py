"""The peers' attention functions on our (B, H, N, D) tensors, for the benchmark: fn(q, k, v) -> out running
`linformer` 0.2.3, `performer-pytorch` 1.1.4 or `linear-attention-transformer` 0.19.1 unmodified (only
their projections are replaced by our q, k, v). Each builder is named by its variant's registry entry
(`Variant.peer_bench` in minilin.variants) and benchmarked as `peer-<variant>`; it takes the keywords of every
bench builder (causal, proj_len, nb_features, dim_head, heads) and uses those it needs.
"""


def _quiet():
    """Peers warn on import (distutils LooseVersion) and print on construction; keep a sweep's output clean."""
    import contextlib
    import io
    import warnings

    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", FutureWarning)
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    return stack


def _peer_linformer(n, make, *, proj_len, dim_head, heads, **_):
    """linformer 0.2.3 LinformerSelfAttention with its projections replaced by our q, k, v (same E, F law)."""
    import torch
    import torch.nn as nn

    class Given(nn.Module):  # stands in for its nn.Linear: returns the tensor we set
        value = None

        def forward(self, x):
            return self.value

    with _quiet():
        from linformer import LinformerSelfAttention
        with torch.random.fork_rng(devices=[]):  # its init draws from the global RNG
            attn = LinformerSelfAttention(dim=heads * dim_head, seq_len=n, k=proj_len, heads=heads, dim_head=dim_head)
    attn.to_q, attn.to_k, attn.to_v, attn.to_out = Given(), Given(), Given(), nn.Identity()
    attn.proj_k = nn.Parameter(make.randn(n, proj_len, std=proj_len ** -0.5), requires_grad=False)  # its E: (n, k)
    attn.proj_v = nn.Parameter(make.randn(n, proj_len, std=proj_len ** -0.5), requires_grad=False)

    def fn(q, k, v):
        B, H, N, D = q.shape
        merge = lambda t: t.transpose(1, 2).reshape(B, N, H * D)  # (B, N, H*D): the layout its to_q returns
        attn.to_q.value, attn.to_k.value, attn.to_v.value = merge(q), merge(k), merge(v)
        out = attn(attn.to_q.value)  # (B, N, H*D)
        return out.view(B, N, H, D).transpose(1, 2)  # (B, H, N, D)
    return fn


def _peer_performer(n, make, *, causal, nb_features, dim_head, **_):
    """performer-pytorch 1.1.4 FastAttention (q, k, v -> out) with our projection in its buffer. Causal
    without fast_transformers' CUDA kernel runs its non-CUDA fallback, as it does for every pip user."""
    import torch
    with _quiet():
        from performer_pytorch import FastAttention
        with torch.random.fork_rng(devices=[]):
            fast = FastAttention(dim_heads=dim_head, nb_features=nb_features, causal=causal)
    fast.projection_matrix = make.projection(nb_features, dim_head)  # (m, D) buffer
    return fast


def _peer_efficient(n, make, *, causal, **_):
    """linear-attention-transformer 0.19.1's global heads; causal with bucket_size=1 (its SelfAttention's
    default blindspot_size)."""
    import functools
    with _quiet():
        from linear_attention_transformer.linear_attention_transformer import causal_linear_attn, linear_attn
    fn = functools.partial(causal_linear_attn, bucket_size=1) if causal else linear_attn
    return lambda q, k, v: fn(q, k, v)

