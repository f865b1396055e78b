"""`python -m minilin bench`: run a sweep, write its CSV and PNG plots, print growth exponents and ratio tables;
with --decode, time decoding one token at a time instead (minilin.bench.decode).

Every option value is checked before the sweep starts (method names, lengths, device, output folder); a bad
one is a `minilin.cli.UsageError`: one line on stderr naming the fix, exit code 2.
"""
import argparse
import os
import sys
import re
import shlex
import textwrap
import time

from minilin.bench import decode
from minilin.bench.methods import DEFAULT_METHODS, DTYPES, get_method
from minilin.bench.names import method_examples
from minilin.bench.results import ROUND_METRICS, load_csv, write_csv
from minilin.bench.sweep import PASSES, BenchConfig, run
from minilin.cli import Parser, UsageError, nonnegative_int, positive_float, positive_int

DEFAULT_OUT = "results"

# --quick leaves out peer-performer-causal: its non-CUDA fallback loops over 128 chunks in Python at every n,
# seconds per call on a CPU even at n=256 and the slowest meta model (name it in --methods to include it)
QUICK = {"lengths": (256, 512, 1024, 2048), "model_lengths": (256, 512, 1024, 2048, 4096, 16384, 65536),
         "min_run_time": 0.05, "rounds": 3, "max_seconds": 0.5,
         "methods": tuple(m for m in DEFAULT_METHODS if m != "peer-performer-causal")}

# wall time on an otherwise idle 2-core CPU (README's table of commands says the same); the default sweep is
# dominated by exact attention and performer-pytorch's causal fallback at n = 4096 and 8192
QUICK_TIME, DEFAULT_TIME = "1 min", "8 min"  # measured by tests/readme_times.py (the README's table)

# A timing whose slowest round took more than DISAGREE times its fastest disagrees with itself; when more than
# DISAGREE_SHARE of a sweep's timings do (or the load average before it exceeded the cores), the figures are
# flagged. A quiet 2-core CPU stays under 1.25x (results/reference/causal-scans); launch-bound GPU timings at
# short lengths reach 1.7x in a few cases (18 % of the H200 causal sweep over 1.5x), not in a quarter of them.
DISAGREE, DISAGREE_SHARE = 1.5, 0.25

# --decode --quick: a few short contexts, about 20 s on a 2-core CPU
QUICK_DECODE = {"contexts": (256, 512, 1024, 2048), "min_run_time": 0.05, "rounds": 3, "max_seconds": 0.5}


def parse_lengths(text):
    """'256,512,1024' or '256,512,...,16384' (continue the ratio of the first two up to the last)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    example = "e.g. 256,512,1024 or 256,512,...,16384"
    numbers = [p for p in parts if p != "..."]
    bad = [p for p in numbers if not re.fullmatch(r"\d+", p)]
    if not numbers or bad:
        raise argparse.ArgumentTypeError(f"lengths are positive whole numbers separated by commas ({example}), "
                                         f"got {text!r}")
    if "..." in parts:
        if parts.count("...") != 1 or parts.index("...") != 2 or len(parts) != 4:
            raise argparse.ArgumentTypeError(f"write '...' as in 256,512,...,16384 (two lengths, ..., the last), "
                                             f"got {text!r}")
        a, b, last = int(parts[0]), int(parts[1]), int(parts[3])
        if not 0 < a < b <= last:
            raise argparse.ArgumentTypeError(f"with '...' the lengths must increase, as in 256,512,...,16384; "
                                             f"got {text!r}")
        values = [a, b]
        while values[-1] * b // a <= last:
            values.append(values[-1] * b // a)
        if values[-1] != last:
            values.append(last)
    else:
        values = [int(p) for p in numbers]
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"lengths must be at least 1 ({example}), got {text!r}")
    return tuple(values)


def parse_bytes(text):
    """'512MiB', '4GiB', '4G' or '1e9' -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?(?:e\d+)?)\s*([KMGT]?)(i?B)?\s*", text, flags=re.I)
    if not match or not 0 < float(match.group(1)) < float("inf"):
        raise argparse.ArgumentTypeError(f"memory must look like 512MiB, 4GiB or 1e9, got {text!r}")
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def _indented(names):
    return textwrap.fill(", ".join(names), 100, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)


def build_parser():
    from minilin.device import DEVICE_HELP
    d = BenchConfig()
    p = Parser(
        prog="python -m minilin bench",
        description="Time, memory and FLOP curves of attention variants at the attention-function level\n"
                    "(q, k, v -> out), ours and the peers' at matching B, H, D, proj_len and m. Writes a tidy\n"
                    "CSV (one row per method x n x metric) and log-log PNG plots, and prints growth exponents\n"
                    "and ratio tables. Measured rows come from this device; 'model' rows from the same code\n"
                    "run on device='meta' (no memory used), extended to n=65536.\n\n"
                    f"On a 2-core CPU, --quick takes about {QUICK_TIME} and the default sweep about "
                    f"{DEFAULT_TIME}\n(a progress bar shows where it is; --no-progress or TQDM_DISABLE=1 "
                    "hide it).",
        epilog="examples:\n  python -m minilin bench --quick\n"
               "  python -m minilin bench --lengths 256,512,...,16384 --methods exact,sdpa,linformer-k256,performer\n"
               "  python -m minilin bench --device cuda --dtype float16 --out results/gpu\n\n"
               "methods: a variant, -causal, -k<proj_len> (linformer), -m<features> (performer), and peer- for\n"
               "the library's version of the variant, e.g.\n" + _indented(method_examples())
               + "\ndefault:\n" + _indented(DEFAULT_METHODS),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=parse_lengths, default=None,
                   help="sequence lengths to measure, e.g. 256,512,...,16384 (default "
                        f"{','.join(map(str, d.lengths))}; --quick: {','.join(map(str, QUICK['lengths']))})")
    p.add_argument("--model-lengths", type=parse_lengths, default=None,
                   help="lengths for the meta-device model (default: the measured ones doubled up to 65536)")
    p.add_argument("--methods", default="default",
                   help="comma-separated method names, 'default' or 'all-ours' (the default ones without peers)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--dtype", default="float32", choices=list(DTYPES))
    p.add_argument("--batch", type=positive_int, default=d.batch, help=f"batch size B (default {d.batch})")
    p.add_argument("--heads", type=positive_int, default=d.heads, help=f"heads H (default {d.heads})")
    p.add_argument("--dim-head", type=positive_int, default=d.dim_head,
                   help=f"head dimension D (default {d.dim_head})")
    p.add_argument("--nb-features", type=positive_int, default=d.nb_features,
                   help=f"FAVOR+ random features m, ours and performer-pytorch's (default {d.nb_features})")
    p.add_argument("--min-run-time", type=positive_float, default=None,
                   help=f"seconds of timed calls per method, n and pass (default {d.min_run_time})")
    p.add_argument("--rounds", type=positive_int, default=None, help=f"interleaved timing rounds (default {d.rounds})")
    p.add_argument("--max-seconds", type=positive_float, default=None,
                   help=f"a single call slower than this is recorded as 'slow' (default {d.max_seconds})")
    p.add_argument("--max-memory", type=parse_bytes, default=None,
                   help="predicted peak above this is recorded as 'oom' without running, e.g. 4GiB "
                        "(default on CPU: a quarter of RAM; on CUDA: run and catch out-of-memory errors)")
    p.add_argument("--passes", default=None, help="fwd, fwdbwd or both (default fwd,fwdbwd)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="CPU threads for torch (default: torch's own choice); fewer gives steadier timings on a "
                        "busy machine")
    p.add_argument("--seed", type=nonnegative_int, default=0,
                   help="seed of the inputs, E, F and projections (default 0)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder for CSV and PNG (default {DEFAULT_OUT}/)")
    p.add_argument("--quick", action="store_true",
                   help=f"small CPU-friendly sweep, about {QUICK_TIME} on a 2-core CPU: lengths "
                        "256..2048, the model at 256..2048, 4096, 16384, 65536, short timings, calls over 0.5 s "
                        "recorded as slow, the default methods except peer-performer-causal (seconds per call "
                        "on a CPU)")
    p.add_argument("--decode", action="store_true",
                   help="measure decoding instead: ms per generated token and the bytes held between tokens after "
                        "n cached tokens (--lengths; default 256..16384 on CPU, 256..65536 on CUDA; --quick "
                        "256..2048) for " + ", ".join(decode.DECODE_METHODS) + " (--methods picks among them); "
                        "writes decode-<device>-<dtype>.csv and .png. --rounds, --min-run-time, --max-seconds, "
                        "--max-memory, --heads, --dim-head, --nb-features, --batch, --threads, --seed apply")
    p.add_argument("--no-plots", action="store_true", help="write the CSV only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (or set TQDM_DISABLE=1)")
    return p


def _methods(text, quick):
    if text == "default":
        return quick.get("methods", DEFAULT_METHODS)
    if text == "all-ours":
        return tuple(m for m in DEFAULT_METHODS if not m.startswith("peer-"))
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise UsageError("--methods: give comma-separated method names, 'default' or 'all-ours'")
    try:
        return tuple(get_method(m).name for m in names)  # fail before running anything
    except ValueError as err:
        raise UsageError(f"--methods: {err}") from None


def _triton_needs_a_device(methods, device):
    """Triton methods run on a CUDA device, or on a CPU only in Triton's interpreter (TRITON_INTERPRET=1)."""
    import torch
    from minilin.variants import VARIANTS
    triton = [m for m in methods if VARIANTS[get_method(m).variant].needs_gpu]
    on_cuda = str(device).startswith("cuda") or (device in (None, "auto") and torch.cuda.is_available())
    if triton and not on_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError(f"--methods: {', '.join(triton)} run(s) a Triton kernel: use --device cuda, or set "
                         "TRITON_INTERPRET=1 to run it in Triton's interpreter on a CPU (slow; correctness only)")


def config_from_args(args):
    """The BenchConfig of parsed arguments; UsageError for a value that parsing alone cannot reject."""
    quick = QUICK if args.quick else {}
    text = ",".join(PASSES) if args.passes is None else args.passes
    passes = tuple(p.strip() for p in text.split(",") if p.strip())
    if not passes or any(p not in PASSES for p in passes):
        raise UsageError(f"--passes: use fwd, fwdbwd or fwd,fwdbwd, got {args.passes!r}")
    methods = _methods(args.methods, quick)
    _triton_needs_a_device(methods, args.device)
    d = BenchConfig()
    pick = lambda value, key: value if value is not None else quick.get(key, getattr(d, key))
    return BenchConfig(
        lengths=pick(args.lengths, "lengths"),
        model_lengths=args.model_lengths if args.model_lengths or args.lengths else quick.get("model_lengths"),
        methods=methods,
        batch=args.batch, heads=args.heads, dim_head=args.dim_head, nb_features=args.nb_features,
        device=args.device, dtype=args.dtype, passes=passes,
        min_run_time=pick(args.min_run_time, "min_run_time"), rounds=pick(args.rounds, "rounds"),
        max_seconds=pick(args.max_seconds, "max_seconds"), max_bytes=args.max_memory, seed=args.seed,
        threads=args.threads, progress=not args.no_progress)


def decode_config_from_args(args):
    """The DecodeConfig of parsed arguments with --decode; UsageError for an option that does not apply."""
    for flag, value in (("--model-lengths", args.model_lengths), ("--passes", args.passes)):
        if value is not None:
            raise UsageError(f"{flag} does not apply to --decode (it times one forward step per token at the "
                             f"--lengths contexts); drop {flag}")
    if args.methods in ("default", "all-ours"):
        methods = decode.DECODE_METHODS
    else:
        names = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not names:
            raise UsageError(f"--methods: give comma-separated names among {', '.join(decode.DECODE_METHODS)}")
        try:
            methods = decode.check_methods(names)
        except ValueError as err:
            raise UsageError(f"--methods: {err} (with --decode)") from None
    quick, d = (QUICK_DECODE if args.quick else {}), decode.DecodeConfig()
    pick = lambda value, key: value if value is not None else quick.get(key, getattr(d, key))
    return decode.DecodeConfig(
        contexts=pick(args.lengths, "contexts"), methods=methods, batch=args.batch, heads=args.heads,
        dim_head=args.dim_head, nb_features=args.nb_features, device=args.device, dtype=args.dtype,
        min_run_time=pick(args.min_run_time, "min_run_time"), rounds=pick(args.rounds, "rounds"),
        max_seconds=pick(args.max_seconds, "max_seconds"), max_bytes=args.max_memory, seed=args.seed,
        threads=args.threads, progress=not args.no_progress)


def _device(name):
    from minilin.device import resolve_device
    try:
        return resolve_device(name)
    except ValueError as err:
        raise UsageError(str(err)) from None


def _out_folder(path):
    """Create the output folder now, so a bad --out fails before the sweep, not after it."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--out {path}: is a file, not a folder; pick a folder (default {DEFAULT_OUT}/)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {path}: cannot create this folder ({err.strerror}); pick another") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"--out {path}: this folder is not writable; pick another")
    return path


def cores():
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def load_average():
    """The 1-minute load average, or None where the system has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_warning(rows, load=None, ncores=None):
    """One line when the sweep's timings cannot be trusted (their rounds disagree, or the machine was busier than
    its cores before the sweep started), else None. Reads only the rows already measured: costs no time."""
    rounds = {}
    for row in rows:
        if row["metric"] in ROUND_METRICS and row["status"] == "ok":
            rounds.setdefault((row["method"], row["n"], row["metric"]), []).append(row["value"])
    spreads = [max(v) / min(v) for v in rounds.values() if len(v) >= 2 and min(v) > 0]
    disagree = [s for s in spreads if s > DISAGREE]
    reasons = []
    if load is not None and ncores and load > ncores:
        reasons.append(f"the load average was {load:.1f} on {ncores} cores before it started")
    if spreads and len(disagree) > DISAGREE_SHARE * len(spreads):
        reasons.append(f"in {len(disagree)} of {len(spreads)} timings the slowest round took over {DISAGREE:g}x "
                       f"the fastest (worst {max(disagree):.1f}x)")
    if not reasons:
        return None
    return (f"warning: this machine was busy ({'; '.join(reasons)}): the times, growth exponents and ratios below "
            "may be meaningless; rerun when it is idle (more --rounds and --min-run-time help)")


def main(argv=None):
    """`python -m minilin bench ...`: run the sweep, write CSV (+ PNG), print the ratio tables."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.decode:
        return decode_main(args, argv)
    cfg = config_from_args(args)
    device = _device(cfg.device)
    out = _out_folder(args.out)
    stem = os.path.join(out, f"bench-{device.type}-{cfg.dtype}")
    earlier = [p for p in (stem + ".csv", stem + "-measured.png", stem + "-model.png") if os.path.exists(p)]
    if earlier:  # said before the sweep, so there is time to stop it (Ctrl-C) and choose another --out
        print(f"note: this run replaces {', '.join(earlier)} from an earlier run when it ends; "
              f"use --out DIR to keep both", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    load = load_average() if device.type == "cpu" else None  # other work on the CPU, before ours adds to it
    rows = run(cfg)
    written = [write_csv(rows, stem + ".csv")]
    df = load_csv(written[0])
    from minilin import plots  # plots reads results; only this command draws them
    if not args.no_plots:
        written += plots.save_figures(df, stem)
    if warning := busy_warning(rows, load, cores()):
        print(warning, file=sys.stderr, flush=True)
    print(plots.summary(df))
    print(f"\n{len(rows)} rows in {time.perf_counter() - t0:.0f} s; wrote:")
    for path in written:
        print(f"  {path}")
    return 0


def decode_main(args, argv):
    """`python -m minilin bench --decode ...`: time decoding, write the CSV (+ PNG), print the summary."""
    cfg = decode_config_from_args(args)
    device = _device(cfg.device)
    out = _out_folder(args.out)
    stem = os.path.join(out, f"decode-{device.type}-{cfg.dtype}")
    earlier = [p for p in (stem + ".csv", stem + ".png") if os.path.exists(p)]
    if earlier:
        print(f"note: this run replaces {', '.join(earlier)} from an earlier run when it ends; "
              f"use --out DIR to keep both", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rows = decode.run(cfg)
    command = "python -m minilin bench " + shlex.join(argv)
    written = [decode.write_decode_csv(rows, stem + ".csv", command)]
    df = decode.load_decode_csv(written[0])
    if not args.no_plots:
        written.append(decode.save_decode_figure(df, stem + ".png"))
    print(decode.decode_summary(df))
    print(f"\n{len(rows)} rows in {time.perf_counter() - t0:.0f} s; wrote:")
    for path in written:
        print(f"  {path}")
    return 0
