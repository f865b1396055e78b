"""The one registry of attention variants: one spelling per variant, used by TinyLM/LMConfig, the `train`
command, the benchmark, the plots, the shared tests and the notebooks.

    exact      softmax attention, the reference                    minilin.attention.ExactSelfAttention
    sdpa       the same through F.scaled_dot_product_attention     ExactSelfAttention(sdpa=True)
    linformer  keys/values projected to proj_len slots (non-causal) minilin.linformer.LinformerSelfAttention
    performer  FAVOR+ positive random features                      minilin.performer.PerformerSelfAttention
    linear     elu(x)+1 linear attention (Katharopoulos et al.)     minilin.linear.LinearSelfAttention
    efficient  Shen et al.'s efficient attention (as linear-attention-transformer computes it, up to its D^{-1/2} factor)
                                                                    minilin.efficient.EfficientSelfAttention
    retention  a fixed decay γ per head (RetNet), causal only        minilin.gated_attention.RetentionSelfAttention
    gla        gated linear attention, causal only                  minilin.gated_attention.GLASelfAttention
    deltanet   the delta rule (DeltaNet), causal only               minilin.gated_attention.DeltaNetSelfAttention
    gated-deltanet  the delta rule with a decay, causal only
                                                                    minilin.gated_attention.GatedDeltaNetSelfAttention
    triton-linear     linear, its causal scan a Triton kernel          minilin.kernels.TritonLinearSelfAttention
    triton-retention  retention, its scan a Triton kernel              minilin.kernels.TritonRetentionSelfAttention
                      (needs_gpu: fast only on a GPU; on a CPU the kernels run in Triton's interpreter
                      with TRITON_INTERPRET=1, and the modules compute the same function in PyTorch otherwise)

Adding a variant: its own file (the pure function, its loop reference, its module, its benchmark builder),
one `Variant(...)` entry below naming them by dotted path, its own test file, and its docs. The benchmark
defaults and method names (`minilin.bench.names`), the plot colours (`minilin.plots`, handed out in registry
order: add new variants at the end) and the shared tests (tests/test_linear.py) follow from the entry.
"""
import importlib
from dataclasses import dataclass


def resolve(target):
    """The object a registry field names: "package.module:attr" is imported on first use (the registry imports
    no variant's module, so no variant's module can form an import cycle through it); anything else is
    returned as it is (a callable given directly, e.g. by a test)."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class lazy:  # lowercase: it is used like functools.partial
    """functools.partial for a dotted path: lazy("minilin.attention:ExactSelfAttention", sdpa=True)(dim, heads)."""

    def __init__(self, target, **fixed):
        self.target, self.fixed = target, fixed

    def __call__(self, *args, **kwargs):
        return resolve(self.target)(*args, **self.fixed, **kwargs)

    def __repr__(self):
        return f"lazy({self.target!r}{''.join(f', {k}={v!r}' for k, v in self.fixed.items())})"


def _no_options(config, layer):
    return {}


@dataclass(frozen=True)
class Variant:
    """One attention variant.

    module: its nn.Module class, called module(dim, heads, **options); a "package.module:Class" path, a `lazy`
        one with fixed options, or a callable.
    options(config, layer) -> the module's keyword arguments taken from an LMConfig (a path or a callable).
    bench: builder(n, make, *, causal, proj_len, nb_features, dim_head, heads) -> fn(q, k, v) for the
        benchmark, where make is its tensor factory (make.randn(*shape, std=...), make.projection(m, d); see
        minilin.bench.methods.Tensors); unused keywords are swallowed by **_. peer_bench: the same for the
        peer library's implementation (minilin.peer_attention). Paths or callables.
    peer: the library that implements the same variant (benchmarked as `peer-<name>`), or None.
    bench_default: the method names of this variant in the default sweep; None = derived from the flags
        (see minilin.bench.names.default_methods).
    needs_gpu: its speed needs a GPU (the Triton variants): on a CPU it runs, but says nothing about speed.
    """
    name: str
    label: str
    module: object
    options: object = _no_options
    bench: object = None
    causal: bool = True       # can it be causal?
    bidirectional: bool = True  # can it be non-causal? (False: a recurrence, causal by construction)
    recurrent: bool = True    # does its module have `step` (one-token decoding)?
    linear: bool = True       # O(n) time and memory in the sequence length
    sized_by: str = ""        # "k": Linformer's proj_len (required in its method name); "m": random features
    peer: str = None
    peer_bench: object = None
    bench_default: tuple = None
    needs_gpu: bool = False   # fast only on a GPU (Triton kernels; on a CPU interpreted or computed in PyTorch)


def _linformer_options(config, layer):
    return dict(seq_len=config.block_size, proj_len=config.layer_proj_len()[layer],
                sharing=config.linformer_sharing, projection=config.linformer_projection)


def _performer_options(config, layer):
    return dict(nb_features=config.nb_features, kernel=config.kernel, redraw_interval=config.redraw_interval,
                seed=config.seed + layer)


_BENCH = "minilin.bench.methods:"
_PEER = "minilin.peer_attention:"
_GATED = "minilin.gated_attention:"

VARIANTS = {v.name: v for v in (
    Variant("exact", "exact softmax attention (Vaswani et al. 2017)", "minilin.attention:ExactSelfAttention",
            bench=_BENCH + "exact_fn", linear=False),
    Variant("sdpa", "exact attention through torch's fused scaled_dot_product_attention",
            lazy("minilin.attention:ExactSelfAttention", sdpa=True), bench=_BENCH + "sdpa_fn", linear=False),
    Variant("linformer", "Linformer: keys and values projected to proj_len slots (Wang et al. 2020)",
            "minilin.linformer:LinformerSelfAttention", _linformer_options, _BENCH + "linformer_fn", causal=False,
            recurrent=False, sized_by="k", peer="linformer", peer_bench=_PEER + "_peer_linformer",
            bench_default=("linformer-k64", "linformer-k128", "linformer-k256", "peer-linformer-k256")),
    Variant("performer", "Performer / FAVOR+: positive orthogonal random features (Choromanski et al. 2020)",
            "minilin.performer:PerformerSelfAttention", _performer_options, _BENCH + "performer_fn", sized_by="m",
            peer="performer-pytorch", peer_bench=_PEER + "_peer_performer"),
    Variant("linear", "linear attention with elu(x)+1 features (Katharopoulos et al. 2020)",
            "minilin.linear:LinearSelfAttention", bench=_BENCH + "linear_fn"),
    # efficient-causal is left out of the default sweep: the same chunked scan as linear-causal with 64-position
    # chunks, twice the Python steps (~1 s per case in the meta model at n=65536); it runs by name
    Variant("efficient", "efficient attention (Shen et al. 2018), as linear-attention-transformer computes it up to "
            "its D^{-1/2} factor",
            "minilin.efficient:EfficientSelfAttention", bench=_BENCH + "efficient_fn",
            peer="linear-attention-transformer", peer_bench=_PEER + "_peer_efficient",
            bench_default=("efficient", "peer-efficient", "peer-efficient-causal")),
    # The four recurrences of minilin.gated exist only causal (bidirectional=False: `<name>-causal` in the bench).
    # They are left out of the default sweep (bench_default=()), whose method list and running time the README and
    # notebook 06 state; they run by name, e.g. --methods linear-causal,gla-causal,gated-deltanet-causal
    Variant("retention", "retention: linear attention with a fixed decay per head (RetNet, arXiv 2307.08621)",
            _GATED + "RetentionSelfAttention", bench=_GATED + "retention_fn", bidirectional=False, bench_default=()),
    Variant("gla", "gated linear attention: a decay per key feature from the input (GLA, arXiv 2312.06635)",
            _GATED + "GLASelfAttention", bench=_GATED + "gla_fn", bidirectional=False, bench_default=()),
    Variant("deltanet", "DeltaNet: linear attention written by the delta rule (arXiv 2406.06484)",
            _GATED + "DeltaNetSelfAttention", bench=_GATED + "deltanet_fn", bidirectional=False, bench_default=()),
    Variant("gated-deltanet", "Gated DeltaNet: the delta rule with a decay from the input (arXiv 2412.06464)",
            _GATED + "GatedDeltaNetSelfAttention", bench=_GATED + "gated_deltanet_fn", bidirectional=False,
            bench_default=()),
    # Chapter 10's Triton scan (minilin.kernels): fast on a CUDA GPU; on a CPU the kernels run only in Triton's
    # interpreter (TRITON_INTERPRET=1, for tests), and the modules compute the same function in PyTorch otherwise
    Variant("triton-linear", "linear attention (elu(x)+1) through chapter 10's Triton scan",
            "minilin.kernels.scan:TritonLinearSelfAttention", bench="minilin.kernels.scan:linear_bench_fn",
            bidirectional=False, bench_default=(), needs_gpu=True),
    Variant("triton-retention", "retention (RetNet) through chapter 10's Triton scan",
            "minilin.kernels.scan:TritonRetentionSelfAttention", bench="minilin.kernels.scan:retention_bench_fn",
            bidirectional=False, bench_default=(), needs_gpu=True),
)}
ATTENTIONS = tuple(VARIANTS)


def get(name):
    """The Variant called `name`; a ValueError listing the choices otherwise."""
    if name not in VARIANTS:
        raise ValueError(f"unknown attention {name!r}; choose from {', '.join(VARIANTS)}")
    return VARIANTS[name]


def build_module(name, dim, heads, **options):
    """An attention module by variant name: build_module("performer", 128, 4, nb_features=64)."""
    return resolve(get(name).module)(dim, heads, **options)


def module_for_layer(config, layer, **extra):
    """The attention module of layer `layer` of an LMConfig (its `layer_attention()[layer]` variant)."""
    variant = get(config.layer_attention()[layer])
    if config.causal and not variant.causal:
        raise ValueError(f"{variant.name} attention cannot be causal; see its module's documentation")
    if not config.causal and not variant.bidirectional:
        raise ValueError(f"{variant.name} attention is causal by construction (a recurrence reads the tokens in "
                         f"order): set causal=True (a next-byte LM, --objective clm), or for a masked LM choose one of "
                         f"{', '.join(n for n, v in VARIANTS.items() if v.bidirectional)}")
    options = dict(dim_head=config.head_dim(), dropout=config.dropout, **resolve(variant.options)(config, layer),
                   **extra)
    return resolve(variant.module)(config.dim, config.heads, **options)
