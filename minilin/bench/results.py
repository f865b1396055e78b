"""A sweep's results: the tidy CSV schema (one row per method × n × metric), reading and writing it, and the
numbers read off it: a method's series, its growth exponent, and the crossover length against a baseline.

Nothing here imports torch or another minilin module: reading results never depends on how they were measured.

Columns
    method, n, metric, value, unit   one measurement; value is NaN unless status is "ok"
    source      "measured" (this device) or "model" (the same code on device="meta")
    status      ok | slow | oom | skipped  (see minilin.bench.sweep); note says why
    device, device_name, dtype, torch, threads, batch, heads, dim_head   where and at which sizes
    proj_len    Linformer's projected length (empty for other methods); nb_features: FAVOR+'s m; causal
"""
import os

CSV_COLUMNS = ("method", "n", "metric", "value", "unit", "source", "status", "note", "device", "device_name",
               "dtype", "torch", "threads", "batch", "heads", "dim_head", "proj_len", "nb_features", "causal")
STATUSES = ("ok", "slow", "oom", "skipped")
MEASURED_METRICS = {"time_fwd": "s", "time_fwdbwd": "s", "saved_bytes": "B",
                    "peak_fwd_bytes": "B", "peak_fwdbwd_bytes": "B"}  # the peak_* ones on CUDA only
# one row per timing round (note "round r"): rounds interleave the methods, so method/baseline in the same round
# is a paired ratio, and its spread over rounds is the spread of the comparison (paired_ratio)
ROUND_METRICS = {"time_fwd_round": "s", "time_fwdbwd_round": "s"}
MODEL_METRICS = {"model_saved_bytes": "B", "model_peak_fwd_bytes": "B", "model_peak_fwdbwd_bytes": "B",
                 "model_flops_fwd": "FLOP", "model_flops_fwdbwd": "FLOP"}


def to_frame(rows):
    """Tidy pandas DataFrame with CSV_COLUMNS in order."""
    import pandas as pd
    return pd.DataFrame(list(rows), columns=list(CSV_COLUMNS))


def write_csv(rows, path):
    """Write rows (dicts with CSV_COLUMNS) to path, creating its folder; returns path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    to_frame(rows).to_csv(path, index=False)
    return path


def load_csv(path):
    """Read a bench CSV back; checks the schema so plots never run on a foreign file."""
    import pandas as pd
    df = pd.read_csv(path, keep_default_na=True, dtype={"note": str})
    missing = [c for c in CSV_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path} is not a minilin bench CSV: missing columns {missing}")
    df["proj_len"] = df["proj_len"].astype("Int64")
    df["note"] = df["note"].fillna("")
    return df


def series(df, method, metric, *, status="ok"):
    """(ns, values) of one method and metric, sorted by n, rows with the given status only."""
    sel = df[(df["method"] == method) & (df["metric"] == metric) & (df["status"] == status)].sort_values("n")
    return sel["n"].to_numpy(), sel["value"].to_numpy()


def paired_ratio(df, method, baseline, metric="time_fwd"):
    """{n: (median, q1, q3, rounds)} of method / baseline time per call, round by round (both timed in the same
    interleaved round, so a load change hits both), for every n where both have `metric`_round rows."""
    import numpy as np
    rows = df[(df["metric"] == metric + "_round") & (df["status"] == "ok")]
    out = {}
    for n in sorted(set(rows[rows["method"] == method]["n"]) & set(rows[rows["method"] == baseline]["n"])):
        a = rows[(rows["method"] == method) & (rows["n"] == n)].set_index("note")["value"]
        b = rows[(rows["method"] == baseline) & (rows["n"] == n)].set_index("note")["value"]
        both = sorted(set(a.index) & set(b.index))
        if both:
            r = np.array([a[k] / b[k] for k in both])
            out[int(n)] = (float(np.median(r)), float(np.quantile(r, 0.25)), float(np.quantile(r, 0.75)), len(r))
    return out


def growth_exponent(ns, values):
    """Least-squares slope of log(value) against log(n): ~2 for quadratic growth, ~1 for linear."""
    import numpy as np
    ns, values = np.asarray(ns, dtype=float), np.asarray(values, dtype=float)
    if len(ns) < 2 or np.any(values <= 0):
        raise ValueError("need at least two points with positive values to fit a growth exponent")
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def first_of_final_wins(wins):
    """Smallest key of {length: won?} from which every larger length is a win too; None if the largest is not."""
    crossover = None
    for n in sorted(wins, reverse=True):
        if not wins[n]:
            break
        crossover = n
    return crossover


def crossover_length(df, method, baseline, metric):
    """Smallest measured n from which `method` is below `baseline` at every larger n of both; None if never."""
    n_m, v_m = series(df, method, metric)
    n_b, v_b = series(df, baseline, metric)
    common = sorted(set(n_m.tolist()) & set(n_b.tolist()))
    wins = {n: v_m[n_m.tolist().index(n)] < v_b[n_b.tolist().index(n)] for n in common}
    # the baseline failing (oom/slow/skipped) while the method ran counts as the method winning
    failed = set(df[(df["method"] == baseline) & (df["metric"] == metric) & (df["status"] != "ok")]["n"])
    for n in sorted(failed & set(n_m.tolist())):
        wins[n] = True
    return first_of_final_wins(wins)
