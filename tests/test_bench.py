"""minilin.bench: the meta-device memory model against measured saved bytes, growth exponents, the CSV schema,
slow / out-of-memory handling and the command line. Correctness only: no assertion depends on a timing."""
import argparse
import math

import pytest
import torch

from minilin import bench, variants
from minilin.bench.names import method_examples

# Small shapes so that every case runs in milliseconds on a 2-core CPU.
SMALL = bench.BenchConfig(batch=2, heads=2, dim_head=16, nb_features=32, progress=False)
OURS = ["exact", "exact-causal", "sdpa", "sdpa-causal", "linformer-k24", "performer", "performer-causal", "linear",
        "linear-causal", "efficient", "efficient-causal", "retention-causal", "gla-causal", "deltanet-causal",
        "gated-deltanet-causal"]
PEERS = ["peer-linformer-k24", "peer-performer", "peer-performer-causal", "peer-efficient", "peer-efficient-causal"]


CASES = [(m, n) for m in OURS for n in (64, 160)] + [pytest.param(m, 40, marks=pytest.mark.peers) for m in PEERS]


@pytest.mark.parametrize("method, n", CASES)
def test_meta_model_predicts_measured_saved_bytes(method, n):
    # The model runs the very same code on device="meta"; the tensors autograd keeps have the same shapes and
    # dtypes there, so the bytes must agree exactly (n=160, 40: not multiples of the scan's chunk of 128).
    measured = bench.measured_saved_bytes(method, n, SMALL, device="cpu")
    model = bench.model_case(method, n, SMALL)["model_saved_bytes"]
    assert measured == model
    assert measured >= 3 * 2 * 2 * n * 16 * 4  # at least q, k, v (float32) are kept alive


def test_saved_bytes_count_each_storage_once():
    x = torch.randn(100, 100, requires_grad=True)
    # x * x saves x twice (as self and other); x.t() is a view of the same storage: still 40 000 bytes
    saved, _ = bench.saved_tensor_bytes(lambda t: (t * t).sum() + (t.t() * 2.0).sum(), x)
    assert saved == 100 * 100 * 4
    y = torch.randn(100, 100, requires_grad=True)
    saved, _ = bench.saved_tensor_bytes(lambda a, b: (a * b).sum(), x, y)
    assert saved == 2 * 100 * 100 * 4


def test_saved_bytes_forget_what_is_freed_before_the_end():
    # a side computation (a check, a statistic) saves its own tensors, then its graph is dropped with them:
    # backward keeps nothing of it. Before, its storage stayed in the count, or was overwritten by a later
    # storage at the same address, so a sweep's measured bytes depended on what ran before (allocator reuse).
    x = torch.randn(100, 100, requires_grad=True)

    def fn(t):
        side = (t * 2.0).exp()  # exp saves its 40 000-byte output
        del side
        return (t * 3.0).sum()  # a product with a Python number and a sum save no tensor

    assert bench.saved_tensor_bytes(fn, x)[0] == 0


def test_live_bytes_counts_new_storages_until_freed():
    a = torch.zeros(1000)  # allocated before: not counted
    with bench.LiveBytes() as live:
        b = a * 2.0  # +4000
        c = b.view(10, 100)  # a view: no new memory
        d = torch.ones(500)  # +2000 -> peak 6000
        del b, c, d  # freed: back to 0
        e = torch.ones(250)  # +1000
    assert live.peak == 6000
    assert live.current == 1000
    assert e.numel() == 250


def test_live_bytes_same_on_meta_and_cpu():
    # the meta kernels must allocate outputs like the CPU kernels do, or the model's peaks would be fiction
    for method in ("exact", "performer-causal", "linear", "linformer-k24"):
        fn_cpu = bench.attention_fn(method, 128, SMALL, bench.Tensors("cpu", torch.float32, 0))
        fn_meta = bench.attention_fn(method, 128, SMALL, bench.Tensors("meta", torch.float32, 0))
        peaks = []
        for device, fn in (("cpu", fn_cpu), ("meta", fn_meta)):
            q, k, v = (torch.randn(2, 2, 128, 16).to(device) for _ in range(3))
            with torch.no_grad(), bench.LiveBytes() as live:
                fn(q, k, v)
            peaks.append(live.peak)
        assert peaks[0] == peaks[1] > 0, method


def test_exact_forward_peak_holds_the_attention_matrix():
    # exact attention materialises (B, H, N, N) scores and probabilities at the same time during the softmax
    n = 1024
    peak = bench.model_case("exact", n, SMALL)["model_peak_fwd_bytes"]
    matrix = 2 * 2 * n * n * 4
    assert 2 * matrix <= peak <= 4 * matrix
    assert bench.model_case("sdpa", n, SMALL)["model_peak_fwd_bytes"] < matrix / 10  # fused: no N x N


GROWTH_NS = (2048, 4096, 8192, 16384)


def _slope(method, metric):  # bench.model_case caches per process: four metrics cost one model run per n
    return bench.growth_exponent(GROWTH_NS, [bench.model_case(method, n, SMALL)[metric] for n in GROWTH_NS])


@pytest.mark.parametrize("method", OURS)
@pytest.mark.parametrize("metric", ["model_saved_bytes", "model_peak_fwd_bytes", "model_peak_fwdbwd_bytes",
                                    "model_flops_fwd", "model_flops_fwdbwd"])
def test_growth_is_what_the_registry_says(method, metric):
    # the registry's `linear` flag is the claim: slope 1 (every term linear in n for fixed proj_len, m, D and
    # chunk size) or 2 (the n x n scores). n >= 2048 with D=16: the O(n·D) terms of exact attention are under
    # 1% of the n² ones, so both slopes hold within 0.05. SDPA's fused kernel is the one exception by design:
    # it saves memory (linear), not FLOPs (quadratic).
    m = bench.get_method(method)
    fused_memory = m.variant == "sdpa" and "flops" not in metric
    expected = 1.0 if (m.linear or fused_memory) else 2.0
    assert _slope(method, metric) == pytest.approx(expected, abs=0.05)


@pytest.mark.parametrize("name", [pytest.param(m, marks=pytest.mark.peers) if m.startswith("peer-") else m
                                  for m in method_examples()])
def test_every_registry_example_runs_in_the_bench(name):
    # one registry: whatever minilin.variants lists as a method, the bench can model (and label) it
    model = bench.model_case(name, 64, SMALL)
    assert set(model) == set(bench.MODEL_METRICS) and all(v > 0 for v in model.values())
    method = bench.get_method(name)
    assert method.name == name
    assert method.source == (variants.VARIANTS[method.variant].peer if method.peer else "minilin")


def test_growth_exponent_and_crossover_on_known_data():
    assert bench.growth_exponent([1, 2, 4, 8], [3, 12, 48, 192]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        bench.growth_exponent([1], [1.0])
    rows = []
    for n, exact, lin in ((256, 1.0, 2.0), (512, 4.0, 3.0), (1024, 16.0, 5.0), (2048, 64.0, 9.0)):
        for method, value in (("exact", exact), ("lin", lin)):
            rows.append({"method": method, "n": n, "metric": "time_fwd", "value": value, "status": "ok"})
    df = bench.to_frame(rows)
    assert bench.crossover_length(df, "lin", "exact", "time_fwd") == 512
    assert bench.crossover_length(df, "exact", "lin", "time_fwd") is None
    # a baseline that ran out of memory at the largest n counts as beaten there
    df.loc[(df["method"] == "exact") & (df["n"] == 2048), "status"] = "oom"
    assert bench.crossover_length(df, "lin", "exact", "time_fwd") == 512


TINY = bench.BenchConfig(lengths=(32, 64), model_lengths=(32, 64, 128), methods=("exact", "performer", "linformer-k16"),
                         batch=1, heads=2, dim_head=8, nb_features=16, min_run_time=0.002, rounds=2,
                         max_seconds=60.0, progress=False)


def test_csv_schema(tmp_path):
    rows = bench.run(TINY)
    path = bench.write_csv(rows, tmp_path / "out" / "bench.csv")
    df = bench.load_csv(path)
    assert list(df.columns) == list(bench.CSV_COLUMNS)
    assert set(df["status"]) == {"ok"}
    assert set(df["device"]) == {"cpu"} and set(df["dtype"]) == {"float32"}
    assert set(df["torch"]) == {torch.__version__} and set(df["threads"]) == {torch.get_num_threads()}
    assert (df["batch"] == 1).all() and (df["heads"] == 2).all() and (df["dim_head"] == 8).all()
    # tidy: one row per method x n x metric (x round, for the per-round times)
    assert not df.duplicated(["method", "n", "metric", "note"]).any()
    summary = df[~df["metric"].isin(bench.ROUND_METRICS)]
    assert not summary.duplicated(["method", "n", "metric"]).any()
    for _, row in df.iterrows():
        units = {**bench.MEASURED_METRICS, **bench.MODEL_METRICS, **bench.ROUND_METRICS}
        assert row["unit"] == units[row["metric"]]
        assert row["source"] == ("model" if row["metric"].startswith("model_") else "measured")
        assert math.isfinite(row["value"]) and row["value"] > 0
    measured = {"time_fwd", "time_fwdbwd", "saved_bytes", "time_fwd_round", "time_fwdbwd_round"}
    for method in TINY.methods:
        for n in (32, 64):
            got = set(df[(df["method"] == method) & (df["n"] == n)]["metric"])
            assert got == measured | set(bench.MODEL_METRICS)
        assert set(df[(df["method"] == method) & (df["n"] == 128)]["metric"]) == set(bench.MODEL_METRICS)
    assert df[df["method"] == "linformer-k16"]["proj_len"].dropna().unique().tolist() == [16]
    assert df[df["method"] != "linformer-k16"]["proj_len"].isna().all()
    with pytest.raises(ValueError, match="not a minilin bench CSV"):
        (tmp_path / "other.csv").write_text("a,b\n1,2\n")
        bench.load_csv(tmp_path / "other.csv")


def test_predicted_out_of_memory_is_recorded_not_run():
    cfg = bench.BenchConfig(**{**TINY.__dict__, "lengths": (32, 64, 128)})
    exact_64 = bench.model_case("exact", 64, cfg)["model_peak_fwdbwd_bytes"]
    limit = exact_64 - 1  # exact fits at n=32 only
    assert bench.model_case("linformer-k16", 128, cfg)["model_peak_fwdbwd_bytes"] < limit
    df = bench.to_frame(bench.run(cfg, max_bytes=limit))
    measured = df[df["source"] == "measured"]
    status = measured.groupby(["method", "n"])["status"].agg(set).to_dict()
    assert status[("exact", 32)] == {"ok"}
    assert status[("exact", 64)] == {"oom"} and status[("exact", 128)] == {"skipped"}
    assert all(status[("linformer-k16", n)] == {"ok"} for n in (32, 64, 128))
    assert measured[measured["status"] != "ok"]["value"].isna().all()
    assert "predicted peak" in measured[(measured["method"] == "exact") & (measured["n"] == 64)]["note"].iloc[0]
    assert (df[df["source"] == "model"]["status"] == "ok").all()  # the model covers every case regardless


def test_threads_are_set_for_the_sweep_and_restored():
    before = torch.get_num_threads()
    df = bench.to_frame(bench.run(TINY, methods=("exact",), lengths=(32,), model_lengths=(32,), threads=1))
    assert set(df["threads"]) == {1}
    assert torch.get_num_threads() == before


def test_too_slow_is_recorded_and_larger_lengths_skipped():
    df = bench.to_frame(bench.run(TINY, methods=("exact",), max_seconds=0.0))
    measured = df[df["source"] == "measured"].set_index(["n", "metric"])["status"]
    # the first (warm-up) call already exceeds the limit: nothing of that case is kept, nothing larger runs
    assert set(measured.loc[32].index) == {"time_fwd", "time_fwdbwd", "saved_bytes"}
    assert set(measured.loc[32]) == {"slow"}
    assert set(measured.loc[64]) == {"skipped"}
    assert df[df["source"] == "measured"]["value"].isna().all()
    assert "took" in df[(df["source"] == "measured") & (df["n"] == 32)]["note"].iloc[0]


def test_out_of_memory_error_is_caught(monkeypatch):
    # what a CUDA out-of-memory looks like to the sweep, raised on the real device only (the model is fine)
    def function(n, make, causal, **sizes):
        def fn(q, k, v):
            if q.device.type != "meta" and n >= 64:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
            return q + k + v
        return fn

    boom = variants.Variant("boom", "raises OOM at n >= 64", module=None, bench=function)
    monkeypatch.setitem(variants.VARIANTS, "boom", boom)  # the bench has no registry of its own to patch
    df = bench.to_frame(bench.run(TINY, methods=("boom", "exact")))
    measured = df[df["source"] == "measured"]
    assert set(measured[(measured["method"] == "boom") & (measured["n"] == 64)]["status"]) == {"oom"}
    assert set(measured[(measured["method"] == "boom") & (measured["n"] == 32)]["status"]) == {"ok"}
    assert set(measured[measured["method"] == "exact"]["status"]) == {"ok"}  # the sweep went on


def test_unknown_method_and_bad_arguments():
    with pytest.raises(ValueError, match="unknown method"):
        bench.get_method("nope")
    assert bench.get_method("linformer-k300").proj_len == 300
    assert bench.get_method("peer-linformer-k8").source == "linformer"
    assert bench.get_method("performer-m64").nb_features == 64
    with pytest.raises(ValueError, match="dtype"):
        bench.resolve_dtype("float8")
    with pytest.raises(ValueError, match="passes"):
        bench.run(TINY, passes=("backward",))


def test_parse_lengths():
    assert bench.parse_lengths("256,512,...,4096") == (256, 512, 1024, 2048, 4096)
    assert bench.parse_lengths("100, 300") == (100, 300)
    assert bench.parse_lengths("256,512,...,3000") == (256, 512, 1024, 2048, 3000)
    assert bench.parse_lengths("1") == (1,)
    for bad in ("256,...,4096", "512,256,...,4096", "0,1", "0", "", "abc", "256,x", "-5", "1.5", "2,4,...",
                "2,4,...,8,16", "2,4,...,...", "...,2,4"):
        with pytest.raises(argparse.ArgumentTypeError, match="256,512"):  # the message shows the right form
            bench.parse_lengths(bad)
    assert bench.parse_bytes("4GiB") == 4 * 2**30 and bench.parse_bytes("512M") == 512 * 2**20
    assert bench.parse_bytes("1e9") == 10**9
    for bad in ("lots", "0", "-1GiB", "4XB", "1e999"):
        with pytest.raises(argparse.ArgumentTypeError, match="4GiB"):
            bench.parse_bytes(bad)


def test_cli_writes_csv_and_png_to_results(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no --out: the default folder is results/ under the current folder
    code = bench.main(["--lengths", "32,64", "--model-lengths", "32,64,128", "--methods", "exact,linformer-k128",
                       "--heads", "2", "--dim-head", "8", "--nb-features", "16", "--min-run-time", "0.002",
                       "--rounds", "2", "--no-progress"])
    assert code == 0
    out_dir = tmp_path / "results"
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["bench-cpu-float32-measured.png", "bench-cpu-float32-model.png", "bench-cpu-float32.csv"]
    assert all((out_dir / name).stat().st_size > 10_000 for name in names if name.endswith(".png"))
    out = capsys.readouterr().out
    assert "growth exponents" in out and "Linformer Table 3" in out
    for name in names:  # says where every file went
        assert f"results/{name}" in out
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "--lengths" in text and "peer-performer-causal" in text and " min" in text


def test_progress_bar_follows_the_config_and_tqdm_disable(capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)  # CI sets it; this test sets it itself below
    small = dict(methods=("exact",), lengths=(32,), model_lengths=(32,), rounds=1)
    bench.run(TINY, progress=True, **small)
    assert "bench" in capsys.readouterr().err  # tqdm writes to stderr
    monkeypatch.setenv("TQDM_DISABLE", "1")
    bench.run(TINY, progress=True, **small)
    assert capsys.readouterr().err == ""


def test_allocator_peak_is_the_allocators_running_peak():
    def f():
        a = torch.empty(1_000_000)  # 4 MB
        b = torch.empty(500_000)  # +2 MB -> 6 MB held at once
        del a
        c = torch.empty(250_000)  # 2 MB + 1 MB after a was freed
        return b, c

    assert bench.allocator_peak(f) == 6_000_000


def test_allocator_peak_agrees_with_live_bytes_where_no_kernel_allocates_inside():
    # an independent meter: the allocator sees every buffer, LiveBytes only the operators' outputs; exact attention
    # allocates nothing inside its kernels, so the two agree; SDPA's fused kernel keeps internal buffers LiveBytes
    # cannot see
    for method, equal in (("exact", True), ("linear", True), ("sdpa", False)):
        make = bench.Tensors("cpu", torch.float32, 0)
        fn = bench.attention_fn(method, 256, SMALL, make)
        q, k, v = (make.randn(2, 2, 256, 16) for _ in range(3))
        with torch.no_grad():
            fn(q, k, v)  # first call out of the way
            with bench.LiveBytes() as live:
                fn(q, k, v)
            peak = bench.allocator_peak(lambda: fn(q, k, v))
        # (the allocator also sees a Python scalar wrapped into a 0-d tensor for a moment: a few bytes)
        assert (0 <= peak - live.peak <= 64) if equal else (peak > 1.05 * live.peak > 0), (method, peak, live.peak)


def test_a_second_run_says_it_replaces_the_first(tmp_path, capsys):
    from minilin.bench.cli import main
    argv = ["--lengths", "32", "--model-lengths", "32", "--methods", "exact", "--heads", "2", "--dim-head", "8",
            "--min-run-time", "0.002", "--rounds", "1", "--no-plots", "--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert "replaces" not in capsys.readouterr().err
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "replaces" in err and "bench-cpu-float32.csv" in err and "--out" in err


def test_paired_ratios_come_from_the_same_rounds(tmp_path):
    """Each round's time of a method over the baseline's in that round; median and IQR of those ratios."""
    rows = bench.run(TINY, methods=("sdpa-causal", "performer-causal"), passes=("fwd",), rounds=4)
    df = bench.load_csv(bench.write_csv(rows, tmp_path / "b.csv"))
    ratios = bench.paired_ratio(df, "performer-causal", "sdpa-causal")
    assert set(ratios) == set(TINY.lengths)
    for n, (median, q1, q3, count) in ratios.items():
        a = df[(df["method"] == "performer-causal") & (df["n"] == n) & (df["metric"] == "time_fwd_round")]
        b = df[(df["method"] == "sdpa-causal") & (df["n"] == n) & (df["metric"] == "time_fwd_round")]
        by_round = sorted(x / y for x, y in zip(a.sort_values("note")["value"], b.sort_values("note")["value"]))
        assert count == len(by_round) >= 1 and q1 <= median <= q3
        assert median == pytest.approx(float(torch.tensor(by_round, dtype=torch.float64).quantile(0.5)))
    from minilin import plots
    text = "\n".join(plots.paired_tables(df))
    assert "performer-causal" in text and "/ sdpa-causal" in text and "[" in text


def test_traffic_counts_each_operators_reads_and_writes_and_no_views():
    from minilin.bench.meters import Traffic
    a, b = torch.ones(5, 3), torch.ones(3, 7, dtype=torch.float64)
    with Traffic() as t:
        a[1:].reshape(-1)[:4].unsqueeze(0).t()     # views: nothing moves
    assert t.moved == 0
    with Traffic() as t:
        a + a                                       # two reads and one write of 15 float32
    assert t.moved == 3 * 15 * 4
    with Traffic() as t:
        a.double() @ b                              # the cast (15 read, 15 written), then (5x3)(3x7) -> (5x7)
    assert t.moved == 15 * 4 + 15 * 8 + (15 + 21 + 35) * 8
    m = torch.empty(2, 4, device="meta", dtype=torch.bfloat16)
    with Traffic() as t:
        m.exp()                                     # on meta: shapes and dtypes only
    assert t.moved == 2 * 8 * 2


def test_operator_bytes_counts_sdpas_inputs_output_and_log_sum_exp_only():
    from minilin.bench import BenchConfig, operator_bytes
    cfg = BenchConfig(batch=1, heads=2, dim_head=8, nb_features=16, device="cpu", progress=False)
    assert operator_bytes("sdpa", 64, cfg) == 4 * 2 * 64 * 8 * 4 + 2 * 64 * 4   # q, k, v, out; one lse per row
    assert operator_bytes("exact", 64, cfg) > 2 * 2 * 64 * 64 * 4               # the scores are written and read


def test_every_timed_method_keeps_the_shape_and_sdpa_equals_exact():
    """Notebook 06's timed methods, causal and not: (B, H, N, D) in, the same shape out, finite; sdpa is exact."""
    from minilin.bench import BenchConfig, Tensors, attention_fn
    cfg = BenchConfig(batch=1, heads=8, dim_head=64, nb_features=256, device="cpu", progress=False)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, 64, 64, generator=g) for _ in range(3))
    out = {}
    for name in ("exact", "sdpa", "linformer-k128", "performer", "linear", "efficient", "exact-causal", "sdpa-causal",
                 "performer-causal", "linear-causal"):
        with torch.no_grad():
            out[name] = attention_fn(name, 64, cfg, Tensors("cpu", torch.float32, cfg.seed))(q, k, v)
        assert out[name].shape == q.shape and torch.isfinite(out[name]).all(), name
    assert torch.allclose(out["sdpa"], out["exact"], atol=1e-5)
    assert torch.allclose(out["sdpa-causal"], out["exact-causal"], atol=1e-5)


def test_saved_roles_names_inputs_output_probabilities_and_log_sum_exp():
    import torch.nn.functional as F

    from minilin.attention import softmax_attention
    from minilin.bench import saved_roles
    q, k, v = (torch.randn(1, 2, 16, 8, requires_grad=True) for _ in range(3))
    named = {"input q": q, "input k": k, "input v": v}
    exact = sorted(role for _, _, role in saved_roles(softmax_attention, named)[0])
    assert exact == ["input k", "input q", "input v", "the probabilities P"]
    sdpa = sorted(role for _, _, role in saved_roles(F.scaled_dot_product_attention, named)[0])
    assert sdpa == ["input k", "input q", "input v", "one log-sum-exp per query and head", "the output"]
