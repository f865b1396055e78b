"""The one registry of attention variants: one spelling per variant, used by TinyLM/LMConfig, the `train`
command, the benchmark and the notebooks. Adding a variant is one `Variant(...)` entry in VARIANTS.

    exact      softmax attention, the reference                    minilin.attention.ExactSelfAttention
    sdpa       the same through F.scaled_dot_product_attention     ExactSelfAttention(sdpa=True)
    linformer  keys/values projected to proj_len slots (non-causal) minilin.linformer.LinformerSelfAttention
    performer  FAVOR+ positive random features                      minilin.performer.PerformerSelfAttention
    linear     elu(x)+1 linear attention (Katharopoulos et al.)     minilin.linear.LinearSelfAttention
    efficient  Shen et al.'s efficient attention (as linear-attention-transformer computes it)
                                                                    minilin.efficient.EfficientSelfAttention

Benchmark method names add the causal flag and the size parameter to a variant's name, and `peer-` for the
third-party implementation of the same variant: `performer-causal`, `linformer-k256`, `performer-m128`,
`peer-linformer-k256`, `peer-performer-causal`, `peer-efficient` (`parse_method` / `method_name`).
"""
import math
import re
from dataclasses import dataclass
from functools import partial

from minilin.attention import ExactSelfAttention, sdpa_attention, softmax_attention


@dataclass(frozen=True)
class Variant:
    """One attention variant.

    module(dim, heads, *, options) -> nn.Module; options(config, layer) -> its keyword arguments from an
    LMConfig; function(n, make, causal, proj_len, nb_features, dim_head) -> fn(q, k, v) for the benchmark,
    where make is the benchmark's tensor factory (make.randn(*shape, std=...), make.projection(m, d)).
    peer: the library that implements the same variant (benchmarked as `peer-<name>`), or None.
    """
    name: str
    label: str
    module: object
    options: object
    function: object
    causal: bool = True       # can it be causal?
    recurrent: bool = True    # does its module have `step` (one-token decoding)?
    linear: bool = True       # O(n) time and memory in the sequence length
    sized_by: str = ""        # "k": Linformer's proj_len; "m": the number of random features
    peer: str = None


def _no_options(config, layer):
    return {}


def _linformer_options(config, layer):
    return dict(seq_len=config.block_size, proj_len=config.layer_proj_len()[layer],
                sharing=config.linformer_sharing, projection=config.linformer_projection)


def _performer_options(config, layer):
    return dict(nb_features=config.nb_features, kernel=config.kernel, redraw_interval=config.redraw_interval,
                seed=config.seed + layer)


def _exact_module(dim, heads, **kw):
    return ExactSelfAttention(dim, heads, **kw)


def _sdpa_module(dim, heads, **kw):
    return ExactSelfAttention(dim, heads, sdpa=True, **kw)


def _linformer_module(dim, heads, **kw):
    from minilin.linformer import LinformerSelfAttention
    return LinformerSelfAttention(dim, heads, **kw)


def _performer_module(dim, heads, **kw):
    from minilin.performer import PerformerSelfAttention
    return PerformerSelfAttention(dim, heads, **kw)


def _linear_module(dim, heads, **kw):
    from minilin.linear import LinearSelfAttention
    return LinearSelfAttention(dim, heads, **kw)


def _efficient_module(dim, heads, **kw):
    from minilin.efficient import EfficientSelfAttention
    return EfficientSelfAttention(dim, heads, **kw)


# ---- benchmark functions: fn(q, k, v) with the variant's buffers made once per (n, size) --------------------

def _exact_fn(n, make, causal, **_):
    return partial(softmax_attention, causal=causal)


def _sdpa_fn(n, make, causal, **_):
    import torch
    import torch.nn.functional as functional

    def fn(q, k, v):
        if q.device.type == "meta":  # model the fused kernel SDPA runs on CPU and CUDA, not the math fallback
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)[0]
        return functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def _linformer_fn(n, make, causal, proj_len, **_):
    from minilin.linformer import linformer_attention
    E = make.randn(proj_len, n, std=proj_len ** -0.5)  # (k, n) shared by heads; N(0, 1/k), the JL scaling
    F = make.randn(proj_len, n, std=proj_len ** -0.5)
    return partial(linformer_attention, E=E, F=F)


def _performer_fn(n, make, causal, nb_features, dim_head, **_):
    from minilin.performer import favor_attention
    return partial(favor_attention, projection=make.projection(nb_features, dim_head), causal=causal)


def _linear_fn(n, make, causal, **_):
    from minilin.linear import elu_plus_one, linear_attention
    return partial(linear_attention, feature_map=elu_plus_one, causal=causal)


def _efficient_fn(n, make, causal, **_):
    from minilin.efficient import efficient_attention
    return partial(efficient_attention, causal=causal)


VARIANTS = {v.name: v for v in (
    Variant("exact", "exact softmax attention (Vaswani et al. 2017)", _exact_module, _no_options, _exact_fn,
            linear=False),
    Variant("sdpa", "exact attention through torch's fused scaled_dot_product_attention", _sdpa_module,
            _no_options, _sdpa_fn, linear=False),
    Variant("linformer", "Linformer: keys and values projected to proj_len slots (Wang et al. 2020)",
            _linformer_module, _linformer_options, _linformer_fn, causal=False, recurrent=False, sized_by="k",
            peer="linformer"),
    Variant("performer", "Performer / FAVOR+: positive orthogonal random features (Choromanski et al. 2020)",
            _performer_module, _performer_options, _performer_fn, sized_by="m", peer="performer-pytorch"),
    Variant("linear", "linear attention with elu(x)+1 features (Katharopoulos et al. 2020)", _linear_module,
            _no_options, _linear_fn),
    Variant("efficient", "efficient attention (Shen et al. 2018), as linear-attention-transformer computes it",
            _efficient_module, _no_options, _efficient_fn, peer="linear-attention-transformer"),
)}
ATTENTIONS = tuple(VARIANTS)


def get(name):
    """The Variant called `name`; a ValueError listing the choices otherwise."""
    if name not in VARIANTS:
        raise ValueError(f"unknown attention {name!r}; choose from {', '.join(ATTENTIONS)}")
    return VARIANTS[name]


def build_module(name, dim, heads, **options):
    """An attention module by variant name: build_module("performer", 128, 4, nb_features=64)."""
    return get(name).module(dim, heads, **options)


def module_for_layer(config, layer, **extra):
    """The attention module of layer `layer` of an LMConfig (its `layer_attention()[layer]` variant)."""
    variant = get(config.layer_attention()[layer])
    if config.causal and not variant.causal:
        raise ValueError(f"{variant.name} attention cannot be causal; see its module's documentation")
    options = dict(dim_head=config.head_dim(), dropout=config.dropout, **variant.options(config, layer), **extra)
    return variant.module(config.dim, config.heads, **options)


# ---- benchmark method names ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Method:
    """A benchmarked attention function: a variant, ours or its peer's, causal or not, at one size."""
    variant: str
    peer: bool = False
    causal: bool = False
    proj_len: int = None     # Linformer's k
    nb_features: int = None  # Performer's m (None: the benchmark's default)

    @property
    def name(self):
        return method_name(self)

    @property
    def source(self):
        return VARIANTS[self.variant].peer if self.peer else "minilin"

    @property
    def linear(self):
        return VARIANTS[self.variant].linear

    @property
    def label(self):
        v = VARIANTS[self.variant]
        size = (f", k={self.proj_len}" if self.proj_len else "") + (f", m={self.nb_features}" if self.nb_features else "")
        who = f"{v.peer} (peer)" if self.peer else "minilin"
        return f"{v.label}{', causal' if self.causal else ''}{size} — {who}"


_METHOD = re.compile(r"(peer-)?([a-z]+)(-causal)?(?:-k(\d+))?(?:-m(\d+))?")


def parse_method(text):
    """'peer-performer-causal' -> Method(variant='performer', peer=True, causal=True); ValueError naming the fix."""
    match = _METHOD.fullmatch(text.strip())
    choices = "; ".join(method_examples())
    if not match or match.group(2) not in VARIANTS:
        raise ValueError(f"unknown method {text!r}; methods are a variant ({', '.join(ATTENTIONS)}) with "
                         f"optional -causal, -k<proj_len> (linformer), -m<features> (performer) and a peer- "
                         f"prefix, e.g. {choices}")
    peer, name, causal, k, m = match.groups()
    v = VARIANTS[name]
    if peer and v.peer is None:
        raise ValueError(f"{name} has no third-party counterpart to benchmark; drop 'peer-' "
                         f"(peers exist for {', '.join(n for n, x in VARIANTS.items() if x.peer)})")
    if causal and not v.causal:
        raise ValueError(f"{name} cannot be causal (its projection mixes every position); drop '-causal'")
    if k and v.sized_by != "k":
        raise ValueError(f"-k<proj_len> applies to linformer only, not {name}")
    if m and v.sized_by != "m":
        raise ValueError(f"-m<features> applies to performer only, not {name}")
    if v.sized_by == "k" and not k:
        raise ValueError(f"{name} needs its projected length: write e.g. {'peer-' if peer else ''}{name}-k256")
    return Method(name, peer=bool(peer), causal=bool(causal), proj_len=int(k) if k else None,
                  nb_features=int(m) if m else None)


def method_name(method):
    return ((("peer-" if method.peer else "") + method.variant + ("-causal" if method.causal else ""))
            + (f"-k{method.proj_len}" if method.proj_len else "") + (f"-m{method.nb_features}" if method.nb_features else ""))


def method_examples():
    """A short list of valid method names, for help texts and errors."""
    out = []
    for name, v in VARIANTS.items():
        base = name + ("-k256" if v.sized_by == "k" else "")
        out.append(base)
        if v.causal:
            out.append(name + "-causal")
        if v.peer:
            out.append("peer-" + base)
    return out


def default_nb_features(dim_head):
    """performer-pytorch's default m = int(d · ln d)."""
    return max(1, int(dim_head * math.log(dim_head)))


def attention_function(method, n, make, *, nb_features, dim_head, heads):
    """fn(q, k, v) for a Method at length n (ours, or the peer's through minilin.peers)."""
    if isinstance(method, str):
        method = parse_method(method)
    m = method.nb_features or nb_features
    if method.peer:
        from minilin import peer_attention
        return peer_attention.attention_function(method, n, make, nb_features=m, dim_head=dim_head, heads=heads)
    return VARIANTS[method.variant].function(n, make, method.causal, proj_len=method.proj_len, nb_features=m,
                                             dim_head=dim_head)
