"""Figures and printed tables of single notebooks (05's number formats and padding table), built from what the notebook measured or read: 05's errors against a key shift,
06's timing rounds and memory model, 07's attention maps (and layer-0 weights), 08's rank figure, 10's chunk tiles. The benchmark CSV's plots and tables are in
`minilin.plots`."""
import matplotlib.pyplot as plt

from minilin.plots import line_styles


def sig(x, digits=3):
    """x rounded to `digits` significant digits, for printing."""
    return float(f"{x:.{digits}g}")


def bound(x):
    """A round-off gap as a bound class ("<= 1e-12"), not the last digits of round-off; larger gaps to one digit."""
    return "<= 1e-12" if x <= 1e-12 else f"≈ {x:.0e}"


def reading(x):
    """A measured gap: exactly 0, a round-off class, or two significant figures."""
    return "0 (exactly)" if x == 0 else bound(x) if x <= 1e-12 else f"{x:.1e}"


def print_table(rows, columns, *, digits=2):
    """Print {row name: values} under the column titles, each value to `digits` significant digits."""
    width = max(map(len, rows)) + 1
    print(" " * width + "".join(f"{title:>{len(title) + 3}s}" for title in columns))
    for name, values in rows.items():
        print(f"{name:{width}s}" + "".join(f"{sig(v, digits):>{len(t) + 3}}" for v, t in zip(values, columns)))


def plot_timing_rounds(samples, noncausal, causal, *, rounds, suptitle, base=None):
    """Notebook 06's timing figure from `minilin.bench.interleaved_rounds` samples; returns the Figure.

    samples: {(method, n): seconds per call, one value per round}; noncausal, causal: method names (either may be
    empty: its panels are left out); base: the baseline of the ratio panel (default: the first of `causal`; None
    with no causal methods: no ratio panel). Panels: forward time per call of the non-causal and of the causal
    methods (median of the rounds; band: min-max over the rounds of this one run, drawn only without a ratio
    panel), then each other method of base's group as a
    paired ratio, baseline time / method time in the same round (median, bar: min-max over the rounds; above 1: faster).
    """
    import matplotlib.ticker
    import numpy as np

    def spread(values):  # (lowest, median, highest) of per-round values: every round inside the band
        return tuple(float(x) for x in np.percentile(values, [0, 50, 100]))

    plain = matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}")
    groups = [(names, kind) for names, kind in ((noncausal, "non-causal"), (causal, "causal")) if names]
    base = base or (causal[0] if causal else None)
    fig, axes = plt.subplots(1, len(groups) + bool(base), figsize=(4.7 * (len(groups) + bool(base)), 4.3),
                             squeeze=False)
    axes = axes[0]
    for ax, (names, kind) in zip(axes, groups):
        styles = line_styles(names)  # the colours and markers of the model's figures
        for i, name in enumerate(names):  # a line style each and shrinking markers: near-equal times stay visible
            ns = sorted(n for (method, n) in samples if method == name)
            lo, med, hi = (np.array(x) for x in zip(*(spread(samples[name, n]) for n in ns)))
            ax.plot(ns, med * 1e3, label=name, linewidth=2.2, linestyle=("-", "--", "-.", ":")[i % 4],
                    markersize=max(10.0 - 1.2 * i, 4.0), **styles[name])
            if not base:  # with a ratio panel its bars show the spread; bands here would only overlap
                ax.fill_between(ns, lo * 1e3, hi * 1e3, color=styles[name]["color"], alpha=0.25, lw=0)
        ax.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel="forward time per call (ms)",
               title=f"{kind}: median of {rounds} rounds" + ("" if base else ",\nband: min-max over rounds, one run"))
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plain)
        ax.legend(fontsize=8, loc="upper left")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 5)))  # 1, 2, 5, 10, 20, ...
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # plain numbers only, no 3x10^0 beside 4
    if not base:
        fig.suptitle(suptitle, fontsize=10)
        fig.tight_layout()
        return fig
    ax, lowest = axes[-1], 1.0
    group = causal if base in causal else noncausal
    styles = line_styles(group)
    lengths = sorted(n for (method, n) in samples if method == base)
    for name in (name for name in group if name != base):
        lo, med, hi = np.array([spread(np.asarray(samples[base, n]) / np.asarray(samples[name, n]))
                                for n in lengths]).T
        lowest = min(lowest, lo.min())
        ax.errorbar(lengths, med, yerr=[med - lo, hi - med], label=name, capsize=3, linewidth=2, **styles[name])
    ax.axhline(1, color="0.3", linestyle="--", linewidth=1)
    ax.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel=f"{base} time / method time",
           title="paired ratio (above 1: faster), median;\nbar: min-max over rounds, one run")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=2 ** np.floor(np.log2(lowest)))  # a power of 2 below the lowest ratio
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=2))
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return fig


def plot_memory_vs_n(panels, *, suptitle):
    """Notebook 06's memory figure: bytes against sequence length on log-log axes, one panel per metric; returns
    the Figure.

    panels: {panel title: {method: {n: bytes}}}. Dotted guides of slope n and n² start below every line, so a line
    parallel to one grows like it.
    """
    import matplotlib.ticker
    import numpy as np

    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        styles = line_styles(list(curves))
        for name, points in curves.items():
            ns = sorted(points)
            ax.plot(ns, [points[n] / 2**20 for n in ns], label=name, linewidth=2, **styles[name])
        ns = np.array(sorted({n for points in curves.values() for n in points}), dtype=float)
        base = min(points[min(points)] for points in curves.values()) / 4 / 2**20   # below every line's start
        for power, label in ((1, "∝ n"), (2, "∝ n²")):
            ax.plot(ns, base * (ns / ns[0]) ** power, color="0.5", linestyle=":", linewidth=1.2)
            ax.annotate(label, (ns[-1], base * (ns[-1] / ns[0]) ** power), fontsize=9, color="0.3",
                        xytext=(4, 0), textcoords="offset points", va="center")
        ax.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel="MiB", title=title)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns[::2] if len(ns) > 6 else ns)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return fig


def plot_attention_maps(panels, labels, *, suptitle=None, gamma=1.0, ncols=None):
    """Attention maps on one colour scale (notebook 07's layer-0 heads), `ncols` per row; returns the Figure.

    panels: [(title, (N, N) weights in [0, 1])]; labels: the N bytes (or tokens) shown on both axes.
    NaN entries (masked keys) are drawn grey. Every panel shares one PowerNorm(gamma, 0, 1) scale (linear by
    default; gamma < 1 makes small weights show) and one colour bar; rows are queries, columns keys; each row of panels has its own y-label.
    """
    from matplotlib.colors import PowerNorm

    norm = PowerNorm(gamma, vmin=0.0, vmax=1.0)
    cmap = plt.get_cmap("magma").copy()
    cmap.set_bad("lightgrey")      # NaN (e.g. a masked future key) is drawn grey, apart from weight 0
    ncols = ncols or len(panels)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.9 * ncols + 1.0, 4.0 * nrows), layout="constrained",
                             squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (title, weights) in zip(axes.flat, panels):
        if tuple(weights.shape) != (len(labels), len(labels)):
            raise ValueError(f"panel {title!r}: weights {tuple(weights.shape)}, but {len(labels)} labels")
        image = ax.imshow(weights, cmap=cmap, norm=norm, interpolation="nearest")
        ax.grid(False)
        ax.tick_params(length=0, pad=1)
        ax.set_xticks(range(len(labels)), labels, fontsize=8, family="monospace")
        ax.set_yticks(range(len(labels)), labels, fontsize=8, family="monospace")
        ax.set_xlabel("key (byte read)", fontsize=9)
        ax.set_title(title, fontsize=9)
    for row in axes:
        row[0].set_ylabel("query (byte reading)", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight" + (f" (power {gamma:g})" if gamma != 1 else ""))
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


def first_layer_weights(model, windows, mix):
    """Layer 0's attention weights of notebook 07's `ByteLM` on windows (B, N) of byte ids: (B, H, N, N).

    Rebuilds what layer 0's Attention reads (embeddings, then its LayerNorm), projects queries and keys as it does,
    and runs `mix` on identity values: output row i is then query i's weights over the keys."""
    import torch

    B, N = windows.shape
    heads, param = model.blocks[0].attn.heads, next(model.parameters())
    windows = windows.to(param.device)
    with torch.no_grad():
        x0 = model.blocks[0].ln1(model.tok_emb(windows) + model.pos_emb(torch.arange(N, device=param.device)))
        attn = model.blocks[0].attn
        split = lambda t: t.view(B, N, heads, -1).transpose(1, 2)   # (B, H, N, d/H), as in Attention
        eye = torch.eye(N, dtype=param.dtype, device=param.device).expand(B, heads, N, N)
        return mix(split(attn.to_q(x0)), split(attn.to_k(x0)), eye).cpu()


def byte_labels(ids):
    """One printable character per byte id: space and newline as symbols, other non-printing bytes as a dot."""
    return [{32: "\u2423", 10: "\u23ce"}.get(b, chr(b) if 33 <= b < 127 else "\u00b7") for b in ids]


def plot_causal_maps(panels, ids, *, show, suptitle=None):
    """Notebook 07's layer-0 maps: the first `show` queries and keys of each (title, (N, N) weights) panel, masked
    future keys grey, byte labels from `ids`; returns the Figure."""
    import torch

    future = torch.ones(show, show, dtype=torch.bool).triu(1)
    cropped = [(title, torch.as_tensor(w)[:show, :show].masked_fill(future, float("nan")).numpy()) for title, w in panels]
    return plot_attention_maps(cropped, byte_labels(list(ids)[:show]), ncols=2, suptitle=suptitle)


CHUNK_TILE_KINDS = ("future: zero (causal mask)", "inside a chunk: a masked c x c tile",
                    "earlier chunks: through the carried state S")


def chunk_tile_kinds(n, c):
    """(n, n) ints: 0 where key j is after query i, 1 in the diagonal c x c tiles (j <= i, same chunk),
    2 below them (j in an earlier chunk than i), the part a chunked scan reads from its D x D state."""
    return [[0 if j > i else (1 if i // c == j // c else 2) for j in range(n)] for i in range(n)]


def plot_chunk_tiles(n=8, c=2):
    """The chunked causal scan as a picture: the n x n grid of (query i, key j) pairs, coloured by how the scan
    reaches each (CHUNK_TILE_KINDS), chunk boundaries drawn, and one arrow per state hand-over between the
    numbered chunks that a program walks in order. Returns the Figure."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    colours = ["white", "tab:orange", "tab:blue"]
    fig, ax = plt.subplots(figsize=(4.8, 5.4), layout="constrained")
    ax.imshow(chunk_tile_kinds(n, c), cmap=ListedColormap(colours), vmin=0, vmax=2, interpolation="nearest")
    ax.grid(False)
    for edge in range(c, n, c):
        ax.axhline(edge - 0.5, color="black", lw=1)
        ax.axvline(edge - 0.5, color="black", lw=1)
    corners = [(t, min(t + c, n) - 1) for t in range(0, n, c)]  # (key, query) of each tile's lower-left pair
    for step, (x, y) in enumerate(corners, 1):
        ax.text(x, y, str(step), ha="center", va="center", fontsize=12, weight="bold")
    for (x0, y0), (x1, y1) in zip(corners, corners[1:]):
        ax.annotate("", xy=(x1 - 0.3, y1 - 0.3), xytext=(x0 + 0.3, y0 + 0.3),
                    arrowprops={"arrowstyle": "->", "lw": 1.5, "color": "black"})
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xlabel("key j (token)")
    ax.set_ylabel("query i (token)")
    ax.set_title(f"N = {n} tokens, chunks of c = {c}: one program walks chunks\n"
                 "1, 2, ... in order; each arrow hands the state S on", fontsize=9)
    ax.legend([Patch(facecolor=col, edgecolor="black") for col in colours], CHUNK_TILE_KINDS, fontsize=8,
              loc="upper center", bbox_to_anchor=(0.5, -0.12))
    return fig


def plot_rank_two_ways(cut, trained=None, *, markers, chance, colour="tab:green", suptitle=None):
    """Notebook 08's rank-cut appendix: one panel, or two with `trained`; returns the Figure.

    cut: {label: DataFrame (r x seed)}, a copying map cut to rank r per head; trained (optional): {label: {k: {seed:
    acc}}}, models trained at k (one E, F shared by both heads); the two get separate x axes because rank r per head is
    not rank k per layer. markers: {seed: marker}; one `colour` (the runs' learning rate); the first label of each dict
    is drawn with filled markers and solid lines, the second hollow and dashed (the longer runs, say).
    """
    from matplotlib.lines import Line2D

    style = lambda i: dict(color=colour, lw=0.8, mfc="none" if i else None, ls="--" if i else "-")
    fig, axes = plt.subplots(1, 2 if trained else 1, figsize=(11 if trained else 6.5, 4.2), layout="constrained",
                             sharey=True, squeeze=False)
    ax_c = axes[0, 0]
    for i, table in enumerate(cut.values()):
        for s in table.columns:
            ax_c.plot(table.index, table[s], marker=markers[s], **style(i))
    styles = lambda labels: [Line2D([], [], marker="o", label=label, **style(i)) for i, label in enumerate(labels)]
    seeds = [Line2D([], [], ls="", marker=m, color=colour, label=f"seed {s}") for s, m in markers.items()]
    ax_c.legend(handles=styles(cut) + seeds, fontsize=8, loc="lower right")
    ax_c.set(ylim=(0, 1.03), ylabel="copy accuracy (validation)", xticks=sorted(next(iter(cut.values())).index),
             xlabel="r: rank kept per head, cut after training (two heads: up to 2r)",
             title="cut: a copying map truncated to rank r per head")
    ax_c.axhline(chance, color="black", lw=1.5, ls=":")
    if trained:
        ax_k = axes[0, 1]
        for i, by_k in enumerate(trained.values()):
            ks = sorted(by_k)
            for s in markers:
                ax_k.plot(ks, [by_k[k][s] for k in ks], marker=markers[s], **style(i))
        ax_k.legend(handles=styles(trained) + seeds, fontsize=8, loc="lower right")     # each panel reads alone
        ax_k.axhline(chance, color="black", lw=1.5, ls=":")
        ax_k.set(xlabel="k: rows of the one E, F both heads share (rank k per layer)",
                 xticks=sorted(next(iter(trained.values()))), title="trained: a model with E, F of k rows")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def plot_error_vs_shift(shifts, errors, *, ceiling=30.0, floor=1e-17, nudge=0.2, title=None):
    """Notebook 05's pitfall 2: each implementation's max |difference from the exact answer| against a shift added
    to every key, on a log axis, one panel per precision (e.g. float64 | float16, one shared y axis; each titled by
    its precision when there are several); returns the Figure.

    shifts: the x values; errors: {(name, precision): one error per shift}; one colour, marker and line width per
    name (the first widest: coinciding lines stay visible), the same in both panels. A NaN or inf error is drawn
    near `ceiling` in the name's colour with a marker of its own per name ('x', '+', '*', ...), each name a little
    lower and `nudge` further right (the line breaks there); an exact 0 at `floor`, the axis' bottom. One legend,
    outside the panels on the right.
    """
    import math

    names = list(dict.fromkeys(name for name, _ in errors))
    precisions = list(dict.fromkeys(precision for _, precision in errors))
    colours = dict(zip(names, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    nan_markers = dict(zip(names, "x+*1P"))
    width = 12 if len(precisions) > 1 else 8.5  # one panel: narrower, the legend still beside it
    fig, axes = plt.subplots(1, len(precisions), figsize=(width, 4.4), sharey=True, layout="constrained", squeeze=False)
    handles = {}
    for ax, precision in zip(axes[0], precisions):
        for (name, p), values in errors.items():
            if p != precision:
                continue
            i = names.index(name)
            finite = [max(e, floor) if math.isfinite(e) else math.nan for e in values]
            handles[name], = ax.plot(shifts, finite, color=colours[name], marker="os^dv"[i % 5], markersize=4,
                                     linewidth=max(3.2 - i, 1.0), label=name)
            dx = nudge * (i - (len(names) - 1) / 2)  # each name's marks a little to the side: none hides another
            bad = [s + dx for s, e in zip(shifts, values) if not math.isfinite(e)]
            mark, = ax.plot(bad, [ceiling / 2.5 ** i] * len(bad), linestyle="none", marker=nan_markers[name],
                            markersize=9, markeredgewidth=1.8, color=colours[name])
            if bad:
                handles[f"{name}: NaN or inf (drawn at the top)"] = mark
        ax.set(yscale="log", ylim=(floor, ceiling * 3), xlabel="shift added to every key",
               title=precision if len(precisions) > 1 else None)  # one panel: no precision title
    axes[0, 0].set_ylabel("max |difference from the exact answer|\n(an exact 0 at the bottom)")
    lines = [k for k in handles if k in names] + [k for k in handles if k not in names]
    fig.legend([handles[k] for k in lines], lines, loc="outside right center", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig
