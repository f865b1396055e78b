"""Time, memory and FLOP curves for every attention variant; `python -m minilin bench` is its command line.

    names     method names over the registry (minilin.variants), the default sweep       parse_method, Method
    methods   a name -> fn(q, k, v) by its variant's builder, the tensor factory          get_method, Tensors
    meters    saved bytes, live bytes, bytes moved, FLOPs (also on "meta"), timers  saved_tensor_bytes, model_case
    sweep     every method × length, interleaved medians, slow / out-of-memory rows      BenchConfig, run
    rounds    interleaved timing rounds, paired per-round ratios (notebook 06)    interleaved_rounds, paired
    results   the CSV schema, load / write, series, growth exponents, crossovers         load_csv, growth_exponent
    decode    ms per generated token and bytes held between tokens (`bench --decode`)   DecodeConfig, run
    decode_results  its CSV (own schema), crossover context, summary, figure       load_decode_csv, decode_crossover
    cli       the command line                                                           main, parse_lengths

`minilin.plots` draws the CSV and reads only `minilin.bench.results` (and the names, `minilin.bench.names`).
"""
from minilin.bench.cli import QUICK, build_parser, config_from_args, main, parse_bytes, parse_lengths
from minilin.bench.meters import (
    LiveBytes,
    OpTimes,
    Traffic,
    allocator_peak,
    block_timer,
    flop_counter,
    measured_saved_bytes,
    model_case,
    operator_bytes,
    saved_roles,
    saved_storages,
    storage_key,
    saved_tensor_bytes,
    torch_threads,
)
from minilin.bench.methods import (DEFAULT_METHODS, DTYPES, Tensors, attention_fn, attention_function, get_method,
                                   resolve_dtype)
from minilin.bench.names import Method, default_methods, method_examples, method_name, parse_method
from minilin.bench.results import (
    CSV_COLUMNS,
    MEASURED_METRICS,
    MODEL_METRICS,
    ROUND_METRICS,
    STATUSES,
    crossover_length,
    growth_exponent,
    load_csv,
    paired_ratio,
    series,
    to_frame,
    write_csv,
)
from minilin.bench.rounds import (MIN_BLOCK, ROUNDS, attention_call, interleaved_rounds, machine_balance, paired, show,
                                   show_range, spread, time_attention, timing_clock, where_time_goes)
from minilin.bench.sweep import PASSES, BenchConfig, default_model_lengths, run
