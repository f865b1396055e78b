"""The decoding benchmark's results (minilin.bench.decode): its CSV, the crossover context, the summary, the figure.

No torch here, as in minilin.bench.results: reading results never depends on how they were measured. The decode
CSV is its own file (decode-<device>-<dtype>.csv), one row per method × context, not the sweep's tidy schema:

    method, context        a decoding method (DECODE_METHODS) after `context` tokens
    ms_per_token, ms_q1, ms_q3, rounds   median and interquartile range over `rounds` interleaved timing blocks
    state_bytes            bytes of the tensors held between tokens, measured on the device (NaN if not built)
    model_state_bytes      the same from device="meta" (present for every row; equal to state_bytes and formula)
    status, note           ok | slow | oom | skipped, and why
    device, device_name, dtype, torch, threads, batch, heads, dim_head, nb_features   where and at which sizes

Its first line is a comment, `# command: python -m minilin bench --decode ...`, the command that wrote it.
"""
import math
import os

from minilin.bench.results import first_of_final_wins

DECODE_METHODS = ("exact-kv-cache", "exact-no-cache", "performer", "linear", "retention", "gla", "deltanet",
                  "gated-deltanet")
GATED = ("retention", "gla", "deltanet", "gated-deltanet")
LABELS = {"exact-kv-cache": "exact, KV cache", "exact-no-cache": "exact, no cache (prefix recomputed)",
          "performer": "performer (FAVOR+ state)", "linear": "linear, elu+1 (state)", "retention": "retention (S)",
          "gla": "gla (S)", "deltanet": "deltanet (S)", "gated-deltanet": "gated-deltanet (S)"}
DECODE_COLUMNS = ("method", "context", "ms_per_token", "ms_q1", "ms_q3", "rounds", "state_bytes",
                  "model_state_bytes", "status", "note", "device", "device_name", "dtype", "torch", "threads",
                  "batch", "heads", "dim_head", "nb_features")
COMMAND = "# command: "
STYLE_AS = {"exact-kv-cache": "exact"}  # the sweep figures' colour and marker of exact attention (plots.line_styles)


def write_decode_csv(rows, path, command):
    """Write rows (dicts with DECODE_COLUMNS) to path under a `# command: ...` line; returns path."""
    import pandas as pd
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(f"{COMMAND}{command}\n")
        pd.DataFrame(list(rows), columns=list(DECODE_COLUMNS)).to_csv(f, index=False)
    return path


def load_decode_csv(path):
    """Read a decode CSV back (its comment lines skipped, the command in df.attrs["command"]); checks the schema."""
    import pandas as pd
    with open(path, encoding="utf-8") as f:
        comments = []
        for line in f:
            if not line.startswith("#"):
                break
            comments.append(line.rstrip("\n"))
    df = pd.read_csv(path, skiprows=len(comments), dtype={"note": str})  # not comment="#": a note may hold one
    missing = [c for c in DECODE_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path} is not a minilin decode CSV: missing columns {missing}")
    df["note"] = df["note"].fillna("")
    df.attrs["command"] = next((c[len(COMMAND):] for c in comments if c.startswith(COMMAND)), "")
    return df


def _row(df, method, context):
    rows = df[(df["method"] == method) & (df["context"] == context)]
    return rows.iloc[0] if len(rows) else None


def decode_crossover(df, method="performer", baseline="exact-kv-cache"):
    """Smallest context from which `baseline`'s median ms/token is above `method`'s at every larger context where
    `method` ran (a baseline that was slow / out of memory / skipped there counts as above); None if none."""
    ran = sorted(df[(df["method"] == method) & (df["status"] == "ok")]["context"])
    wins = {}
    for context in ran:
        b = _row(df, baseline, context)
        if b is not None:
            wins[context] = b["status"] != "ok" or b["ms_per_token"] > _row(df, method, context)["ms_per_token"]
    return first_of_final_wins(wins)


def _ms(row):
    if row is None:
        return "not run"
    if row["status"] != "ok":
        return row["status"]
    return f"{row['ms_per_token']:.3g} ms (IQR {row['ms_q1']:.3g}-{row['ms_q3']:.3g})"


def crossover_line(df, method="performer", baseline="exact-kv-cache"):
    """One sentence: the crossover context with both medians and IQRs there, or 'no crossover up to N'."""
    if not {method, baseline} <= set(df["method"]):
        return f"crossover: needs both {baseline} and {method} in the run"
    c = decode_crossover(df, method, baseline)
    last = int(df[df["method"].isin([method, baseline])]["context"].max())
    at = c if c is not None else last
    b, m = _row(df, baseline, at), _row(df, method, at)
    both = f"at {at}: {baseline} {_ms(b)}, {method} {_ms(m)}"
    if c is None:
        return f"no crossover up to {last}: {method} is not cheaper per token than {baseline} ({both})"
    overlap = (b is not None and m is not None and b["status"] == "ok" and m["status"] == "ok"
               and b["ms_q1"] <= m["ms_q3"])
    return (f"crossover: {method} decodes a token faster than {baseline} from context {c} on ({both}"
            + ("; the IQRs overlap there, so the exact crossover is within the noise" if overlap else "") + ")")


def _bytes(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{int(x)} B"


def describe(df):
    """'cpu (name, 2 threads), float32, B=1 H=8 D=64 m=256' from the CSV's columns."""
    r = df.iloc[0]
    threads = f", {r['threads']} thread{'s' if r['threads'] != 1 else ''}" if r["device"] == "cpu" else ""
    return (f"{r['device']} ({r['device_name']}{threads}), {r['dtype']}, B={r['batch']} H={r['heads']} "
            f"D={r['dim_head']} m={r['nb_features']}")


def decode_summary(df):
    """ms per token (median) per method and context, the bytes held at the largest context, the crossover line."""
    contexts = sorted(set(df["context"]))
    methods = [m for m in DECODE_METHODS if m in set(df["method"])]
    width = max(len(m) for m in methods)
    head = f"{'method':{width}s} " + " ".join(f"{c:>8d}" for c in contexts) + f"   held at {contexts[-1]}"
    lines = [f"decoding: ms per generated token after n cached tokens (median), {describe(df)}", head]
    for name in methods:
        cells = []
        for c in contexts:
            r = _row(df, name, c)
            cells.append("-" if r is None else f"{r['ms_per_token']:.3g}" if r["status"] == "ok" else r["status"])
        last = _row(df, name, contexts[-1])
        lines.append(f"{name:{width}s} " + " ".join(f"{x:>8s}" for x in cells)
                     + f"   {_bytes(None if last is None else last['model_state_bytes'])}")
    lines.append("held bytes: measured on the device = meta model = formula at every context that ran")
    lines.append(crossover_line(df))
    return "\n".join(lines)


def decode_figure(df):
    """Two log-log panels: ms per token with IQR error bars, and bytes held between tokens, against the context."""
    import matplotlib.pyplot as plt
    from minilin.plots import line_styles  # the sweep figures' colours and markers
    methods = [m for m in DECODE_METHODS if m in set(df["method"])]
    styles = line_styles([STYLE_AS.get(m, m) for m in methods])
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4.2))
    notes = []
    for i, name in enumerate(methods):
        style = dict(styles[STYLE_AS.get(name, name)], label=LABELS[name], linewidth=max(2.6 - 0.25 * i, 1.0),
                     markersize=max(8.0 - 0.6 * i, 3.5), markeredgecolor="white", markeredgewidth=0.5)
        rows = df[df["method"] == name].sort_values("context")
        ok = rows[rows["status"] == "ok"]
        ax_t.errorbar(ok["context"], ok["ms_per_token"], capsize=2,
                      yerr=[ok["ms_per_token"] - ok["ms_q1"], ok["ms_q3"] - ok["ms_per_token"]], **style)
        ax_b.plot(rows["context"], rows["model_state_bytes"], **style)
        failed = rows[rows["status"] != "ok"]
        if len(failed):
            first = failed.iloc[0]
            notes.append(f"{name}: {first['status']} from context {first['context']} ({first['note']})")
    for ax in (ax_t, ax_b):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context n (tokens already cached)")
        ax.grid(True, which="major", alpha=0.3)
    ax_t.set_ylabel("ms per generated token")
    ax_t.set_title("time to decode one token (measured; bars: IQR over rounds)", fontsize=9)
    ax_b.set_ylabel("bytes held between tokens (B)")
    ax_b.set_title("state held between tokens (measured = meta model = formula)", fontsize=9)
    constant = {}  # states of the same size draw on top of each other: say their sizes in words
    for name in methods:
        sizes = set(df[df["method"] == name]["model_state_bytes"])
        if len(sizes) == 1:
            constant.setdefault(sizes.pop(), []).append(name)
    if constant:
        notes.insert(0, "held at every context: " + "; ".join(f"{', '.join(names)} {_bytes(size)}"
                                                             for size, names in sorted(constant.items(), reverse=True)))
    handles, labels = ax_t.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=8, frameon=False)
    if notes:
        fig.text(0.5, -0.11, "\n".join(notes), ha="center", va="top", fontsize=7)
    fig.suptitle(f"Decoding at the attention-function level (one layer): {describe(df)}", fontsize=10)
    fig.tight_layout()
    return fig


def save_decode_figure(df, path):
    """Write decode_figure(df) to path (PNG); returns path."""
    import matplotlib.pyplot as plt
    fig = decode_figure(df)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
