"""What the benchmark runs: method names (`minilin.bench.names`) resolved through the one registry
(`minilin.variants`) to fn(q, k, v) -> out, and the tensor factory every method draws its inputs and buffers from.

A method name is a variant plus flags (`performer-causal`, `linformer-k256`, `peer-efficient`);
`attention_function` calls the builder its registry entry names (`Variant.bench`, or `Variant.peer_bench` for
`peer-`), which makes the variant's buffers (Linformer's E and F, FAVOR+'s projection) once from `Tensors`.
The builders of the six variants below; a new variant keeps its builder in its own file.
"""
from functools import partial

import torch

from minilin import variants
from minilin.bench.names import Method, default_methods, parse_method

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}

DEFAULT_METHODS = default_methods()  # from the registry's `bench_default`s; any other valid name runs on request


def get_method(name):
    """The `Method` called `name` (a Method is returned as it is); ValueError naming the fix."""
    if isinstance(name, Method):
        return name
    return parse_method(name)


def resolve_dtype(name):
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return DTYPES[name]


class Tensors:
    """Makes the random tensors of a case: seeded on the CPU (same values on every device), empty on "meta".

    This is the `make` of the bench builders: randn(*shape, std=..., requires_grad=...) and
    projection(nb_features, dim) (FAVOR+'s orthogonal Gaussian (m, D) matrix).
    """

    def __init__(self, device, dtype, seed):
        self.device, self.dtype = torch.device(device), dtype
        self.generator = torch.Generator().manual_seed(seed)

    def randn(self, *shape, std=1.0, requires_grad=False):
        if self.device.type == "meta":
            t = torch.empty(*shape, device="meta", dtype=self.dtype)
        else:
            t = (torch.randn(*shape, generator=self.generator) * std).to(self.device, self.dtype)
        return t.requires_grad_(requires_grad)

    def projection(self, nb_features, dim):
        if self.device.type == "meta":
            return torch.empty(nb_features, dim, device="meta", dtype=self.dtype)
        from minilin.performer import orthogonal_gaussian
        return orthogonal_gaussian(nb_features, dim, generator=self.generator, dtype=self.dtype, device=self.device)


def attention_function(method, n, make, *, nb_features, dim_head, heads):
    """fn(q, k, v) for a Method (or its name) at length n: ours, or the peer's, as its registry entry says."""
    method = get_method(method)
    variant = variants.get(method.variant)
    builder = variant.peer_bench if method.peer else variant.bench
    if builder is None:
        raise ValueError(f"{method.variant} names no {'peer ' if method.peer else ''}benchmark builder in "
                         "minilin.variants")
    return variants.resolve(builder)(n, make, causal=method.causal, proj_len=method.proj_len,
                                     nb_features=method.nb_features or nb_features, dim_head=dim_head, heads=heads)


def attention_fn(method, n, cfg, make):
    """fn(q, k, v) -> out for `method` (a name or Method) at length n, with cfg's D, H and m."""
    return attention_function(method, n, make, nb_features=cfg.nb_features, dim_head=cfg.dim_head, heads=cfg.heads)


def case_inputs(cfg, n, make, *, requires_grad):
    """q, k, v of one case: (B, H, n, D) each."""
    shape = (cfg.batch, cfg.heads, n, cfg.dim_head)
    return tuple(make.randn(*shape, requires_grad=requires_grad) for _ in range(3))


def features_of(method, cfg):
    """The m a method runs with (its -m<M>, else cfg.nb_features)."""
    return get_method(method).nb_features or cfg.nb_features


# ---- the builders named by the registry: fn(q, k, v) with the variant's buffers made once per (n, size) -------

def exact_fn(n, make, *, causal, **_):
    from minilin.attention import softmax_attention
    return partial(softmax_attention, causal=causal)


def sdpa_fn(n, make, *, causal, **_):
    import torch.nn.functional as functional

    def fn(q, k, v):
        if q.device.type == "meta":  # model the fused kernel SDPA runs on CPU and CUDA, not the math fallback
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)[0]
        return functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def linformer_fn(n, make, *, proj_len, **_):
    from minilin.linformer import linformer_attention
    E = make.randn(proj_len, n, std=proj_len ** -0.5)  # (k, n) shared by heads; N(0, 1/k), the JL scaling
    F = make.randn(proj_len, n, std=proj_len ** -0.5)
    return partial(linformer_attention, E=E, F=F)


def performer_fn(n, make, *, causal, nb_features, dim_head, **_):
    from minilin.performer import favor_attention
    return partial(favor_attention, projection=make.projection(nb_features, dim_head), causal=causal)


def linear_fn(n, make, *, causal, **_):
    from minilin.linear import elu_plus_one, linear_attention
    return partial(linear_attention, feature_map=elu_plus_one, causal=causal)


def efficient_fn(n, make, *, causal, **_):
    from minilin.efficient import efficient_attention
    return partial(efficient_attention, causal=causal)
