"""Plots and tables drawn from a `minilin.bench` CSV: log-log curves, growth exponents, Table-3-style ratios.

Every function takes the tidy DataFrame of `minilin.bench.results.load_csv` (one row per method × n × metric);
this module reads the results and never runs the benchmark (`python -m minilin bench` calls it).
Reference: the Linformer paper's Table 3 ("Linformer: Self-Attention with Linear Complexity", Wang et al.
2020, arXiv 2006.04768): time and memory saved vs the Transformer, inference of the whole model on a 16 GB
V100. Our ratios are for the attention function alone, so they are the part of those savings that attention
can give; the shape (savings growing with n, larger for a smaller projected length) is what should match.
"""
import math

import matplotlib.pyplot as plt
import seaborn as sns

from minilin.bench.names import parse_method
from minilin.bench.results import MODEL_METRICS, growth_exponent, paired_ratio, series
from minilin.variants import VARIANTS

# Linformer paper, Table 3: {n: {proj_len: (time saved, memory saved)}}, both "x times" the Transformer
# (the paper calls the projected length k).
TABLE3_PAPER = {
    512: {128: (1.5, 1.7), 256: (1.3, 1.5)},
    1024: {128: (1.7, 3.0), 256: (1.6, 2.9), 512: (1.3, 1.8)},
    2048: {128: (2.6, 6.1), 256: (2.4, 5.6), 512: (2.1, 3.6), 1024: (1.3, 2.0)},
    4096: {128: (3.4, 14), 256: (3.2, 13), 512: (2.8, 8.3), 1024: (2.2, 4.3), 2048: (1.3, 2.3)},
    8192: {128: (5.5, 28), 256: (5.0, 26), 512: (4.4, 17), 1024: (3.5, 8.5), 2048: (2.1, 4.5)},
    16384: {128: (8.6, 56), 256: (7.8, 48), 512: (7.0, 32), 1024: (5.6, 16), 2048: (3.3, 8)},
    32768: {128: (13, 56), 256: (12, 48), 512: (11, 36), 1024: (8.8, 18), 2048: (5.0, 16)},
    65536: {128: (20, 60), 256: (18, 52), 512: (16, 40), 1024: (14, 20), 2048: (7.9, 18)},
}

METRIC_LABELS = {
    "time_fwd": ("forward time (measured)", "seconds"),
    "time_fwdbwd": ("forward + backward time (measured)", "seconds"),
    "saved_bytes": ("saved for backward (measured)", "bytes"),
    "peak_fwd_bytes": ("peak memory, forward (measured, CUDA)", "bytes"),
    "peak_fwdbwd_bytes": ("peak memory, fwd + bwd (measured, CUDA)", "bytes"),
    "model_saved_bytes": ("saved for backward (meta model)", "bytes"),
    "model_peak_fwd_bytes": ("peak memory, forward (meta model)", "bytes"),
    "model_peak_fwdbwd_bytes": ("peak memory, fwd + bwd (meta model)", "bytes"),
    "model_flops_fwd": ("matmul FLOPs, forward (meta model)", "FLOPs"),
    "model_flops_fwdbwd": ("matmul FLOPs, fwd + bwd (meta model)", "FLOPs"),
}


def _parsed(name):
    """The registry's Method for a CSV method name; None for a name it does not know (a test's fake method)."""
    try:
        return parse_method(name)
    except ValueError:
        return None


def method_order(name):
    """Sort key: the registry's variant order, ours before the peer's, non-causal first, then by size."""
    m = _parsed(name)
    order = list(VARIANTS)
    if m is None:
        return (len(order), False, False, 0, 0, name)
    return (order.index(m.variant), m.peer, m.causal, m.proj_len or 0, m.nb_features or 0, name)


def _methods(df, methods=None):
    present = list(dict.fromkeys(df["method"]))
    if methods is not None:
        return [m for m in methods if m in present]
    return sorted(present, key=method_order)


# Colours are handed out to the registry's variants in its order, so a method keeps its colour in every figure
# and a variant added at the end of the registry changes no existing colour. Each list is used in turn by the
# variants of one kind: ours / the peers' (those with `peer`), sized by Linformer's proj_len or not.
_PAIRS = (("#1f77b4", "#7fb2e5"), ("#ff7f0e", "#ffbb78"), ("#d62728", "#ff9896"), ("#e377c2", "#f7b6d2"),
          ("#9467bd", "#c5b0d5"))  # (non-causal, causal): exact, sdpa, performer, linear, efficient
_PEER_PAIRS = (("#8c564b", "#c49c94"), ("#7f7f7f", "#c7c7c7"))  # peer-performer, peer-efficient
_SHADES = (("#98df8a", "#2ca02c", "#176217", "#0b3d0b"),)  # light (proj_len ≤ 64) to dark (≥ 512): linformer
_PEER_SHADES = (("#dbdb8d", "#bcbd22", "#8c8d16", "#5e5f0f"),)  # peer-linformer
_SPARE_PAIRS = (("#393b79", "#9c9ede"), ("#637939", "#cedb9c"), ("#7b4173", "#de9ed6"), ("#8c6d31", "#e7cb94"),
                ("#843c39", "#e7969c"), ("#3182bd", "#9ecae1"), ("#e6550d", "#fdae6b"), ("#31a354", "#a1d99b"),
                ("#756bb1", "#bcbddc"), ("#636363", "#bdbdbd"))  # matplotlib's tab20b / tab20c, for later variants
_UNKNOWN = ("#17becf", "#9edae5")  # a name the registry does not know


def _families(ours, peers, spares=(), *, sized=None, sized_ours=(), sized_peers=()):
    """{(variant, peer): an entry of `ours` / `peers`, in registry order (variants with sized_by == `sized` draw
    from sized_ours / sized_peers instead); past the end of its list a variant takes the next spare, or None."""
    out, spare = {}, iter(spares)
    for peer in (False, True):
        plain, shades = list(peers if peer else ours), list(sized_peers if peer else sized_ours)
        for name, v in VARIANTS.items():
            if peer and not v.peer:
                continue
            pool = shades if sized and v.sized_by == sized else plain
            out[(name, peer)] = pool.pop(0) if pool else next(spare, None)
    return out


def palette(methods):
    """A fixed colour per method: a hue per family, lighter for causal (except variants that are only causal),
    shades by Linformer's proj_len."""
    table = _families(_PAIRS, _PEER_PAIRS, _SPARE_PAIRS, sized="k", sized_ours=_SHADES, sized_peers=_PEER_SHADES)
    out = {}
    for name in methods:
        m = _parsed(name)
        colors = (table.get((m.variant, m.peer)) if m is not None else None) or _UNKNOWN
        if m is not None and m.proj_len:  # the shade depends on proj_len alone, not on what else is drawn
            out[name] = colors[min(max(round(math.log2(m.proj_len)) - 6, 0), len(colors) - 1)]  # ≤64,128,256,≥512
            continue
        causal = m.causal if m is not None else name.endswith("-causal")
        if m is not None and not VARIANTS[m.variant].bidirectional:
            causal = False  # a causal-only variant (retention, gla, ...) has no second form: its full colour
        out[name] = colors[int(causal)]
    return out


def describe(df):
    """'cpu (name, 2 threads), float32, B=1 H=8 D=64 m=256' from the CSV's columns."""
    first = df.iloc[0]
    threads = f", {first['threads']} threads" if first["device"] == "cpu" else ""
    return (f"{first['device']} ({first['device_name']}{threads}), {first['dtype']}, B={first['batch']} "
            f"H={first['heads']} D={first['dim_head']} m={first['nb_features']}")


def plot_curves(df, metrics, *, methods=None, title=None, col_wrap=3, height=3.0):
    """Log-log curves, one panel per metric, one line per method (causal methods dashed); returns the Figure.

    Only rows with status "ok" are drawn. A line that stops early (the next n was too slow, out of memory or
    skipped) ends in a cross of its colour; the legend says so, and the CSV's status and note give the reason.
    """
    metrics = [m for m in metrics if m in set(df["metric"])]
    if not metrics:
        raise ValueError("none of the requested metrics is in this CSV")
    data = df[(df["status"] == "ok") & df["metric"].isin(metrics)].copy()
    methods = _methods(data, methods)
    data = data[data["method"].isin(methods)]
    data["causal"] = data["causal"].astype(str).map({"True": "causal", "False": "non-causal"})
    grid = sns.relplot(data=data, x="n", y="value", hue="method", hue_order=methods, palette=palette(methods),
                       style="causal", style_order=["non-causal", "causal"], col="metric", col_order=metrics,
                       col_wrap=min(col_wrap, len(metrics)), kind="line", marker="o", markersize=4,
                       height=height, aspect=1.15, facet_kws={"sharey": False})
    grid.set(xscale="log", yscale="log")
    colors, stopped_any = palette(methods), False
    for ax in grid.axes.flat:
        metric = ax.get_title().split(" = ")[-1]
        for method in methods:
            rows = df[(df["method"] == method) & (df["metric"] == metric)]
            ok = rows[rows["status"] == "ok"].sort_values("n")
            if len(ok) and (rows[rows["status"] != "ok"]["n"] > ok["n"].max()).any():
                ax.plot(ok["n"].iloc[-1], ok["value"].iloc[-1], marker="X", ms=9, color=colors[method], ls="none",
                        markeredgecolor="black", markeredgewidth=0.6, zorder=5)
                stopped_any = True
        label, unit = METRIC_LABELS.get(metric, (metric, ""))
        ax.set_title(label, fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(unit)
    if stopped_any and grid.legend is not None:
        from matplotlib.lines import Line2D
        handles = list(grid.legend.legend_handles) + [Line2D([], [], marker="X", ls="none", color="grey",
                                                              markeredgecolor="black", ms=8)]
        labels = [t.get_text() for t in grid.legend.texts] + ["line stops: next n too slow, out of memory or "
                                                              "skipped (CSV: status, note)"]
        grid.legend.remove()
        grid.figure.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
                           frameon=False)
    grid.figure.suptitle(title or describe(df), y=1.02, fontsize=10)
    grid.figure.subplots_adjust(wspace=0.35, hspace=0.35)
    return grid.figure


def growth_table(df, metrics, *, methods=None, min_n=None):
    """DataFrame (method × metric) of log-log slopes over the rows with status ok and n >= min_n."""
    import pandas as pd
    sel = df if min_n is None else df[df["n"] >= min_n]
    out = {}
    for method in _methods(sel, methods):
        row = {}
        for metric in metrics:
            ns, values = series(sel, method, metric)
            row[metric] = growth_exponent(ns, values) if len(ns) >= 2 and (values > 0).all() else math.nan
        out[method] = row
    return pd.DataFrame.from_dict(out, orient="index")[list(metrics)]


def ratio_table(df, metric, *, baseline="exact", methods=None):
    """DataFrame (n × method) of baseline / method: how many times less time / memory the method needs."""
    import pandas as pd
    base = dict(zip(*series(df, baseline, metric)))
    table = {}
    for method in _methods(df, methods):
        if method == baseline:
            continue
        table[method] = {n: base[n] / v for n, v in zip(*series(df, method, metric)) if n in base and v > 0}
    return pd.DataFrame(table).sort_index()


def peer_table(df, metric):
    """DataFrame (n × method) of our metric / the peer library's, for each method measured next to its `peer-`
    version (< 1: ours is faster or smaller)."""
    import pandas as pd
    present = set(df["method"])
    table = {}
    for ours in _methods(df):
        peer = "peer-" + ours
        if ours.startswith("peer-") or peer not in present:
            continue
        theirs = dict(zip(*series(df, peer, metric)))
        table[ours] = {n: v / theirs[n] for n, v in zip(*series(df, ours, metric)) if theirs.get(n, 0) > 0}
    return pd.DataFrame(table).sort_index()


def _fmt(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.2g}x" if x < 10 else f"{x:.0f}x"


def table3(df, proj_lens=(128, 256), *, baseline="exact", memory="model_peak_fwd_bytes", time="time_fwd",
           ns=None):
    """Linformer Table 3 next to ours: per proj_len, paper 'time / memory' and ours (exact ÷ linformer-k<proj_len>).

    memory: our metric for the memory column (default: the meta model's forward peak, since Table 3 is
    inference); time: our measured time (present only at the measured lengths). Cells are strings.
    """
    import pandas as pd
    ns = sorted(ns or set(df["n"]))
    cols = {}
    for proj_len in proj_lens:
        method = f"linformer-k{proj_len}"
        mem = ratio_table(df, memory, baseline=baseline, methods=[method]).get(method, pd.Series(dtype=float))
        tim = ratio_table(df, time, baseline=baseline, methods=[method]).get(method, pd.Series(dtype=float))
        paper = [TABLE3_PAPER.get(n, {}).get(proj_len) for n in ns]
        cols[f"proj_len={proj_len} paper time/mem"] = [f"{_fmt(p[0])} / {_fmt(p[1])}" if p else "–" for p in paper]
        cols[f"proj_len={proj_len} ours time/mem"] = [f"{_fmt(tim.get(n))} / {_fmt(mem.get(n))}" for n in ns]
    return pd.DataFrame(cols, index=pd.Index(ns, name="n"))


def summary(df):
    """Plain-text digest of a CSV: device, failures, growth exponents, ratios to exact, to SDPA and to the peers."""
    lines = [f"minilin bench: {describe(df)}"]
    bad = df[(df["status"] != "ok")].drop_duplicates(["method", "n", "status"])
    for _, r in bad.iterrows():
        lines.append(f"  {r['method']} n={r['n']}: {r['status']} ({r['note']})")
    metrics = [m for m in ("model_peak_fwd_bytes", "model_flops_fwd", "saved_bytes", "time_fwd")
               if m in set(df["metric"])]
    lines += ["", "growth exponents (log-log slope over n):", growth_table(df, metrics).round(2).to_string()]
    for metric in ("time_fwd", "time_fwdbwd"):
        for base in ("exact", "sdpa"):
            if base in set(df["method"]) and metric in set(df["metric"]):
                table = ratio_table(df, metric, baseline=base)
                if not table.empty:
                    lines += ["", f"{base} {metric} / method {metric} (> 1: the method is faster), columns n:",
                              table.T.round(2).to_string()]
        table = peer_table(df, metric) if metric in set(df["metric"]) else None
        if table is not None and not table.empty:
            lines += ["", f"ours {metric} / the peer library's (< 1: ours is faster), columns n:",
                      table.T.round(2).to_string()]
    lines += paired_tables(df)
    in_paper = {proj_len for row in TABLE3_PAPER.values() for proj_len in row}
    ours = {m.proj_len for m in map(_parsed, set(df["method"])) if m is not None and m.proj_len and not m.peer}
    proj_lens = sorted(ours & in_paper)
    if proj_lens and "exact" in set(df["method"]):
        lines += ["", "Linformer Table 3 (paper: whole model, V100) vs ours (attention only):",
                  table3(df, proj_lens).to_string()]
    return "\n".join(lines)


PAIRED_BASELINES = ("sdpa-causal", "linear-causal")  # causal methods are read against these when measured


def paired_tables(df, baselines=PAIRED_BASELINES):
    """Text tables of method time / baseline time, median [interquartile range] over the interleaved rounds
    (`paired_ratio`), for every causal method measured beside a baseline; [] when there is none."""
    lines = []
    present = set(df["method"])
    for metric in ("time_fwd", "time_fwdbwd"):
        for base in baselines:
            if base not in present:
                continue
            rows = {}
            for method in _methods(df):
                m = _parsed(method)
                if method == base or m is None or not m.causal:
                    continue
                ratios = paired_ratio(df, method, base, metric)
                if ratios:
                    rows[method] = {n: f"{r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]" for n, r in ratios.items()}
            if rows:
                import pandas as pd
                rounds = max(r[3] for m in rows for r in paired_ratio(df, m, base, metric).values())
                lines += ["", f"method {metric} / {base} {metric}, paired by round (< 1: the method is faster), "
                              f"median [IQR] over up to {rounds} rounds, columns n:",
                          pd.DataFrame(rows).T.to_string()]
    return lines


def save_figures(df, stem):
    """Write stem-measured.png and stem-model.png; returns their paths."""
    paths = []
    measured = [m for m in ("time_fwd", "time_fwdbwd", "saved_bytes", "peak_fwd_bytes", "peak_fwdbwd_bytes")
                if m in set(df[df["status"] == "ok"]["metric"])]
    for name, metrics in (("measured", measured), ("model", [m for m in MODEL_METRICS if m != "model_flops_fwdbwd"])):
        if not metrics:
            continue
        fig = plot_curves(df, metrics)
        path = f"{stem}-{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


# ---- figures with a colour and a marker per method, in readable units -------------------------------------------

# Okabe & Ito's colour-blind-safe colours (their yellow left out: too pale on white) and one marker per family,
# handed out in registry order like the palette above, so a method keeps its look in every figure; a second method
# of the same family in one figure, or a variant past the end of the list, takes a spare style.
_STRONG = (("#0072B2", "o"), ("#D55E00", "s"), ("#009E73", "^"), ("#CC79A7", "D"), ("#E69F00", "v"),
           ("#000000", "P"))  # exact, sdpa, linformer, performer, linear, efficient
_PEER_STRONG = (("#56B4E9", "X"), ("#882255", "X"), ("#56B4E9", "X"))  # peer-linformer, -performer, -efficient
_SPARE = (("#332288", "<"), ("#117733", ">"), ("#CC6677", "p"), ("#44AA99", "h"), ("#999933", "*"), ("#AA4499", "d"),
          ("#661100", "8"), ("#6699CC", "H"))  # Paul Tol's muted set
UNITS = {"B": ((2**20, "MiB"), (2**30, "GiB")), "FLOP": ((1e9, "GFLOP"),), "s": ((1e-3, "ms"),)}


def line_styles(methods):
    """{method: {"color": ..., "marker": ...}}: a strong colour and a marker per family; no two methods of
    `methods` share a colour (a second one of a family takes a spare style), up to 16 methods."""
    out, used, table = {}, set(), _families(_STRONG, _PEER_STRONG)
    for name in methods:
        m = _parsed(name)
        style = table.get((m.variant, m.peer)) if m is not None else None
        if style is None or style[0] in used:
            style = next((s for s in _SPARE if s[0] not in used), ("#777777", "."))
        used.add(style[0])
        out[name] = {"color": style[0], "marker": style[1]}
    return out


def scale_unit(unit, largest):
    """(divisor, label) for values in `unit` ("B", "FLOP", "s") whose largest value is `largest`: MiB below 1 GiB,
    else GiB; GFLOP; ms. Unknown units are left as they are."""
    choices = UNITS.get(unit)
    if not choices:
        return 1.0, unit
    divisor, label = choices[0]
    for d, lab in choices[1:]:
        if largest >= d:
            divisor, label = d, lab
    return divisor, label


def plot_lines(df, metrics, *, methods=None, title=None, notes=(), height=3.2):
    """Log-log lines, one panel per metric, one series per method with its own colour and marker (`line_styles`);
    bytes in MiB or GiB, FLOPs in GFLOP, seconds in ms. Series drawn later are thinner and smaller, so a series that
    coincides with an earlier one still shows inside it. One legend under the panels, then `notes` (one per line).
    Only rows with status "ok" are drawn. Returns the Figure."""
    metrics = [m for m in metrics if m in set(df["metric"])]
    if not metrics:
        raise ValueError("none of the requested metrics is in this CSV")
    data = df[(df["status"] == "ok") & df["metric"].isin(metrics)]
    methods = _methods(data, methods)
    styles = line_styles(methods)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.3 * len(metrics), height), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        rows = data[(data["metric"] == metric) & data["method"].isin(methods)]
        unit = rows["unit"].iloc[0] if len(rows) else ""
        divisor, label = scale_unit(unit, rows["value"].max() if len(rows) else 0)
        for i, name in enumerate(methods):
            ns, values = series(data, name, metric)
            if len(ns):
                ax.plot(ns, values / divisor, label=name, linewidth=max(3.0 - 0.45 * i, 1.0),
                        markersize=max(9.0 - 1.1 * i, 4.0), markeredgecolor="white", markeredgewidth=0.6,
                        **styles[name])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(METRIC_LABELS.get(metric, (metric, ""))[0], fontsize=9)
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 6), fontsize=8,
               frameon=False)
    if notes:
        fig.text(0.5, -0.10 - 0.02 * math.ceil(len(labels) / 6), "\n".join(notes), ha="center", va="top", fontsize=8)
    fig.suptitle(title or describe(df), fontsize=10)
    fig.tight_layout()
    return fig
