"""What the benchmark runs: method names resolved through the one registry (`minilin.variants`), and the tensor
factory every method draws its inputs and buffers from.

A method name is a variant plus flags (`performer-causal`, `linformer-k256`, `peer-efficient`; see
`minilin.variants.parse_method`); `attention_fn` turns it into fn(q, k, v) -> out at one length n, with the
variant's buffers (Linformer's E and F, FAVOR+'s projection) drawn once from `Tensors`.
"""
import torch

from minilin import variants

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}

DEFAULT_METHODS = ("exact", "exact-causal", "sdpa", "sdpa-causal", "linformer-k64", "linformer-k128",
                   "linformer-k256", "performer", "performer-causal", "linear", "linear-causal", "efficient",
                   "peer-linformer-k256", "peer-performer", "peer-performer-causal", "peer-efficient",
                   "peer-efficient-causal")
# Not in the default sweep, available by name: "efficient-causal" (the same chunked scan as linear-causal with
# 64-position chunks: twice the Python steps, ~1 s per case in the meta model at n=65536), any linformer-k<K>
# and performer-m<M>.


def get_method(name):
    """The `minilin.variants.Method` called `name` (a Method is returned as it is); ValueError naming the fix."""
    if isinstance(name, variants.Method):
        return name
    return variants.parse_method(name)


def resolve_dtype(name):
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return DTYPES[name]


class Tensors:
    """Makes the random tensors of a case: seeded on the CPU (same values on every device), empty on "meta".

    This is the `make` of `minilin.variants.attention_function`: randn(*shape, std=..., requires_grad=...) and
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


def attention_fn(method, n, cfg, make):
    """fn(q, k, v) -> out for `method` (a name or Method) at length n, with cfg's D, H and m."""
    return variants.attention_function(get_method(method), n, make, nb_features=cfg.nb_features,
                                       dim_head=cfg.dim_head, heads=cfg.heads)


def case_inputs(cfg, n, make, *, requires_grad):
    """q, k, v of one case: (B, H, n, D) each."""
    shape = (cfg.batch, cfg.heads, n, cfg.dim_head)
    return tuple(make.randn(*shape, requires_grad=requires_grad) for _ in range(3))


def features_of(method, cfg):
    """The m a method runs with (its -m<M>, else cfg.nb_features)."""
    return get_method(method).nb_features or cfg.nb_features
