"""Benchmark method names: a registry variant (`minilin.variants`) plus flags, one grammar for the CLI, the CSV,
the plots and the notebooks.

    [peer-]<variant>[-causal][-k<proj_len>][-m<nb_features>]

`peer-` runs the third-party implementation of the same variant, `-causal` its causal form, `-k<K>` Linformer's
projected length (required for a variant with sized_by="k"), `-m<M>` the number of random features of a
variant with sized_by="m" (default: the sweep's). Examples: `performer-causal`, `linformer-k256`,
`performer-m128`, `peer-linformer-k256`, `peer-performer-causal`, `peer-efficient`, `gated-deltanet-causal`.
A variant that is causal by construction (bidirectional=False: retention, gla, deltanet, gated-deltanet) exists
only with `-causal`.
No torch here: `minilin.plots` parses the CSV's names with this module alone.
"""
import re
from dataclasses import dataclass

from minilin.variants import VARIANTS


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


def _method_pattern():
    """The grammar over the registry's names as they are now (a test may add one), longest first: a variant's
    name may hold a hyphen (gated-deltanet), so the name is one of the registry's, not any word."""
    names = "|".join(re.escape(n) for n in sorted(VARIANTS, key=len, reverse=True))
    return rf"(peer-)?({names})(-causal)?(?:-k(\d+))?(?:-m(\d+))?"


def _sized(letter):
    return ", ".join(n for n, v in VARIANTS.items() if v.sized_by == letter) or "no variant"


def parse_method(text):
    """'peer-performer-causal' -> Method(variant='performer', peer=True, causal=True); ValueError naming the fix."""
    match = re.fullmatch(_method_pattern(), text.strip())
    if not match or match.group(2) not in VARIANTS:
        raise ValueError(f"unknown method {text!r}; methods are a variant ({', '.join(VARIANTS)}) with "
                         f"optional -causal, -k<proj_len> ({_sized('k')}), -m<features> ({_sized('m')}) and a "
                         f"peer- prefix, e.g. {'; '.join(method_examples())}")
    peer, name, causal, k, m = match.groups()
    v = VARIANTS[name]
    if peer and v.peer is None:
        raise ValueError(f"{name} has no third-party counterpart to benchmark; drop 'peer-' "
                         f"(peers exist for {', '.join(n for n, x in VARIANTS.items() if x.peer)})")
    if causal and not v.causal:
        raise ValueError(f"{name} cannot be causal (its projection mixes every position); drop '-causal'")
    if not causal and not v.bidirectional:
        raise ValueError(f"{name} is causal by construction (a recurrence reads the tokens in order, it has no "
                         f"bidirectional form); add '-causal': {'peer-' if peer else ''}{name}-causal")
    if k and v.sized_by != "k":
        raise ValueError(f"-k<proj_len> applies to {_sized('k')} only, not {name}")
    if m and v.sized_by != "m":
        raise ValueError(f"-m<features> applies to {_sized('m')} only, not {name}")
    if v.sized_by == "k" and not k:
        raise ValueError(f"{name} needs its projected length: write e.g. {'peer-' if peer else ''}{name}-k256")
    return Method(name, peer=bool(peer), causal=bool(causal), proj_len=int(k) if k else None,
                  nb_features=int(m) if m else None)


def method_name(method):
    """The inverse of parse_method: Method -> its name."""
    return ((("peer-" if method.peer else "") + method.variant + ("-causal" if method.causal else ""))
            + (f"-k{method.proj_len}" if method.proj_len else "") + (f"-m{method.nb_features}" if method.nb_features else ""))


def _forms(name, v):
    """A variant's own names, ours then the peer's: non-causal (when it can be) and causal (when it can be), at
    k=256 if sized."""
    size = 256 if v.sized_by == "k" else None
    ours = [Method(name, causal=c, proj_len=size) for c in (False, True) if (v.causal if c else v.bidirectional)]
    return ours + ([Method(name, peer=True, causal=m.causal, proj_len=size) for m in ours] if v.peer else [])


def method_examples():
    """A short list of valid method names, for help texts and errors: each variant, -causal, peer-."""
    out = []
    for name, v in VARIANTS.items():
        forms = _forms(name, v)
        out += [m.name for m in forms if not m.peer] + [m.name for m in forms if m.peer and not m.causal]
    return out


def default_methods():
    """The default sweep: every variant's `bench_default` (None: all of its `_forms`), ours first, then the
    peers', each in registry order."""
    names = []
    for name, v in VARIANTS.items():
        names += list(v.bench_default) if v.bench_default is not None else [m.name for m in _forms(name, v)]
    return tuple(n for n in names if not n.startswith("peer-")) + tuple(n for n in names if n.startswith("peer-"))
