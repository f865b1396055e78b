"""minilin.bench.decode: each decoder's token equals its full-sequence function's last output, the bytes held between
tokens equal their formulas (measured and on meta), the run's rows, the CSV, the crossover and the command line.
Correctness only: no assertion depends on a timing."""
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from helpers import TOL, qkv

from minilin import gated
from minilin.attention import softmax_attention
from minilin.bench import decode
from minilin.bench.cli import main as bench_main
from minilin.bench.decode_results import crossover_line
from minilin.bench.methods import Tensors
from minilin.linear import LinearState, elu_plus_one, linear_attention, linear_step
from minilin.performer import favor_attention, feature_map, orthogonal_gaussian

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parent.parent
# tiny sizes; Dv + 2 = 10 and m = 16 keep every formula's factors apart
SMALL = decode.DecodeConfig(batch=2, heads=2, dim_head=8, nb_features=16, dtype="float64", device="cpu",
                            progress=False)
FAST = dict(contexts=(16, 32, 64), min_run_time=0.002, rounds=2, batch=1, dtype="float32")
SIZES = dict(batch=2, heads=2, dim_head=8, nb_features=16)


def reference(method, x, projection):
    """The full-sequence function on all context + 1 tokens of decode_inputs: what the decoder's token must equal."""
    q, k, v = x["q"], x["k"], x["v"]
    unit_q, unit_k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    return {"exact-kv-cache": lambda: softmax_attention(q, k, v, causal=True),
            "exact-no-cache": lambda: softmax_attention(q, k, v, causal=True),
            "performer": lambda: favor_attention(q, k, v, projection, causal=True),
            "linear": lambda: linear_attention(q, k, v, feature_map=elu_plus_one, causal=True),
            "retention": lambda: gated.retention(q, k, v, x["gamma"]),
            "gla": lambda: gated.gla(q, k, v, x["log_gate"]),
            "deltanet": lambda: gated.delta_rule(unit_q, unit_k, v, x["beta"]),
            "gated-deltanet": lambda: gated.gated_delta_rule(unit_q, unit_k, v, x["beta"], x["log_alpha"]),
            }[method]()[:, :, -1:]


@pytest.mark.parametrize("method", decode.DECODE_METHODS)
@pytest.mark.parametrize("context", [1, 37, 130])  # 130: the gated prefill crosses chunks of 64
def test_a_decoded_token_equals_the_full_sequence_function(method, context):
    dec = decode.build_decoder(method, context, SMALL, Tensors("cpu", torch.float64, 0))
    out, following = dec.step(dec.state)
    make = Tensors("cpu", torch.float64, 0)  # the same draws in the same order: the same sequence
    x = decode.decode_inputs(SMALL, context, make, method)
    projection = make.projection(SMALL.nb_features, SMALL.dim_head) if method == "performer" else None
    want = reference(method, x, projection)
    assert out.shape == want.shape == (2, 2, 1, 8)
    assert torch.allclose(out, want, atol=TOL, rtol=0), (method, (out - want).abs().max())
    assert torch.equal(dec.work(dec.state), out)  # what is timed computes the same token
    # what it holds next is the state of one more token: same size for a state, one token more for a cache
    assert decode.held_bytes(following) == decode.state_formula(method, context + 1, dtype=torch.float64, **SIZES)


@pytest.mark.parametrize("fmap", ["elu_plus_one", "favor"])
def test_the_closed_form_linear_state_is_the_state_linear_step_reaches(fmap):
    q, k, v = qkv(B=2, H=2, N=50, D=8, seed=3, scale=1.5)
    fm = elu_plus_one if fmap == "elu_plus_one" else feature_map(
        orthogonal_gaussian(16, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    _, stepped = linear_step(q, k, v, feature_map=fm)  # T = 50 tokens, one recurrence step each
    closed = decode.linear_state(fm, k, v)
    for name in ("kv", "z", "log_scale"):
        assert torch.allclose(closed[name], getattr(stepped, name), atol=TOL, rtol=1e-12), name
    # and decoding from it continues the sequence exactly
    q_t, k_t, v_t = qkv(B=2, H=2, N=1, D=8, seed=4)
    a, _ = linear_step(q_t, k_t, v_t, LinearState(**closed, position=50), feature_map=fm)
    b, _ = linear_step(q_t, k_t, v_t, stepped, feature_map=fm)
    assert torch.allclose(a, b, atol=TOL, rtol=0)


def test_state_formulas_by_hand():
    f = lambda method, n, dtype=torch.float32: decode.state_formula(method, n, batch=1, heads=8, dim_head=64,
                                                                    nb_features=256, dtype=dtype)
    assert f("exact-kv-cache", 1024) == 2 * 8 * 1024 * 64 * 4
    assert f("exact-no-cache", 1024) == 1024 * 8  # int64 token ids
    assert f("performer", 1024) == 8 * 256 * (64 + 2) * 4  # kv, z and the running max per feature
    assert f("linear", 1024) == 8 * 64 * (64 + 2) * 4  # F = D
    assert all(f(m, 1024) == 8 * 64 * 64 * 4 == gated.state_bytes(64, 64, 8) for m in decode.GATED)
    assert f("exact-kv-cache", 1024, torch.float16) == 2 * 8 * 1024 * 64 * 2  # the cache keeps the inputs' dtype
    assert f("performer", 1024, torch.bfloat16) == f("performer", 1024)  # states are float32 for half inputs
    assert decode.state_formula("retention", 10, batch=1, heads=8, dim_head=64, nb_features=256, dtype=torch.float32,
                                layers=12) == 12 * f("retention", 10)
    with pytest.raises(ValueError, match="decoding methods are"):
        f("linformer-k64", 16)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_held_bytes_equal_the_formula_on_the_device_and_on_meta(dtype):
    cfg = decode.DecodeConfig(**{**SIZES, "dtype": dtype}, device="cpu")
    for method in decode.DECODE_METHODS:
        held = {}
        for context in (16, 32, 64):
            dec = decode.build_decoder(method, context, cfg, Tensors("cpu", getattr(torch, dtype), 0))
            meta, _ = decode.model_case(method, context, cfg)
            formula = decode.state_formula(method, context, dtype=getattr(torch, dtype), **SIZES)
            held[context] = decode.held_bytes(dec.state)
            assert held[context] == meta == formula, (method, context)
        if method in ("exact-kv-cache", "exact-no-cache"):
            assert held[32] == 2 * held[16] and held[64] == 2 * held[32], method  # grows with the context
        else:
            assert held[16] == held[32] == held[64], method  # constant memory


def test_held_bytes_count_a_whole_storage_not_a_view():
    big = torch.zeros(100)
    assert decode.held_bytes({"a": big[:10]}) == 400
    assert decode.held_bytes({"a": big[:10], "b": big[50:]}) == 400  # one storage, counted once


def test_run_rows():
    rows = decode.run(SMALL, **FAST)
    df = pd.DataFrame(rows)
    assert list(df.columns) == list(decode.DECODE_COLUMNS)
    assert len(df) == len(decode.DECODE_METHODS) * 3 and set(df["status"]) == {"ok"}
    assert (df["state_bytes"] == df["model_state_bytes"]).all()
    assert ((df["ms_q1"] <= df["ms_per_token"]) & (df["ms_per_token"] <= df["ms_q3"]) & (df["ms_q1"] > 0)).all()
    assert set(df["rounds"]) <= {1, 2} and set(df["device"]) == {"cpu"} and set(df["threads"]) == {1}
    by = df.set_index(["method", "context"])["state_bytes"]
    assert by["exact-kv-cache", 64] == 2 * by["exact-kv-cache", 32] == 4 * by["exact-kv-cache", 16]
    assert by["performer", 16] == by["performer", 64] == 1 * 2 * 16 * 10 * 4


def test_unknown_method_is_refused_before_running():
    with pytest.raises(ValueError, match="exact-kv-cache"):
        decode.run(SMALL, methods=("exact",), **FAST)


def test_slow_tokens_are_recorded_and_longer_contexts_skipped():
    rows = decode.run(SMALL, **{**FAST, "max_seconds": 1e-9}, methods=("exact-no-cache",))
    status = {r["context"]: r["status"] for r in rows}
    assert status == {16: "slow", 32: "skipped", 64: "skipped"}
    assert all(math.isnan(r["ms_per_token"]) for r in rows)
    assert rows[0]["state_bytes"] == rows[0]["model_state_bytes"]  # built (then found slow): its bytes are known
    assert "slow at context 16" in rows[1]["note"]


def test_a_predicted_out_of_memory_is_recorded_not_run():
    rows = decode.run(SMALL, **FAST, methods=("exact-kv-cache", "retention"), max_bytes=12_000)
    status = {(r["method"], r["context"]): r["status"] for r in rows}
    assert status["retention", 64] == "ok"
    assert status["exact-kv-cache", 16] == "ok" and status["exact-kv-cache", 64] in ("oom", "skipped")
    oom = next(r for r in rows if r["status"] == "oom")
    assert "GiB" in oom["note"] and math.isnan(oom["state_bytes"]) and oom["model_state_bytes"] > 0


def frame(ms, kv_status=None):
    """A decode frame of performer and exact-kv-cache with the given medians {context: (kv, performer)}."""
    rows = []
    for context, (kv, perf) in ms.items():
        for method, value in (("exact-kv-cache", kv), ("performer", perf)):
            status = (kv_status or {}).get(context, "ok") if method == "exact-kv-cache" else "ok"
            rows.append({c: "" for c in decode.DECODE_COLUMNS} | {
                "method": method, "context": context, "ms_per_token": value if status == "ok" else math.nan,
                "ms_q1": value * 0.95, "ms_q3": value * 1.05, "status": status, "model_state_bytes": 1, "threads": 1,
                "device": "cpu"})
    return pd.DataFrame(rows)


def test_crossover_is_the_smallest_context_from_which_the_cache_stays_slower():
    assert decode.decode_crossover(frame({256: (1, 2), 512: (2, 2.1), 1024: (4, 2), 2048: (8, 2)})) == 1024
    assert decode.decode_crossover(frame({256: (1, 2), 512: (3, 2), 1024: (1.5, 2), 2048: (8, 2)})) == 2048
    assert decode.decode_crossover(frame({256: (1, 2), 512: (1, 2)})) is None
    skipped = frame({256: (1, 2), 512: (3, 2), 1024: (0, 2)}, kv_status={1024: "skipped"})
    assert decode.decode_crossover(skipped) == 512  # a cache that could not run there counts as slower
    line = crossover_line(frame({256: (1, 2), 512: (1, 2)}))
    assert line.startswith("no crossover up to 512") and "IQR 0.95-1.05" in line
    line = crossover_line(frame({256: (1, 2), 512: (3, 1)}))
    assert "from context 512 on" in line and "IQR 2.85-3.15" in line and "overlap" not in line


def test_csv_round_trip_keeps_the_command_and_a_note_with_a_hash(tmp_path):
    rows = decode.run(SMALL, **{**FAST, "contexts": (16,)}, methods=("linear", "gla"))
    rows[0]["note"] = "see issue #1"  # a '#' inside a field is data, not a comment
    path = decode.write_decode_csv(rows, tmp_path / "sub" / "decode.csv", "python -m minilin bench --decode --quick")
    assert path.read_text().splitlines()[0] == "# command: python -m minilin bench --decode --quick"
    df = decode.load_decode_csv(path)
    assert df.attrs["command"] == "python -m minilin bench --decode --quick"
    assert len(df) == 2 and df["note"].iloc[0] == "see issue #1"
    assert df["state_bytes"].tolist() == [r["state_bytes"] for r in rows]
    (tmp_path / "other.csv").write_text("method,n\nexact,1\n")
    with pytest.raises(ValueError, match="not a minilin decode CSV"):
        decode.load_decode_csv(tmp_path / "other.csv")


def test_figure_has_two_labelled_log_log_panels(tmp_path):
    df = pd.DataFrame(decode.run(SMALL, **FAST, methods=("exact-kv-cache", "performer", "retention")))
    fig = decode.decode_figure(df)
    time_ax, bytes_ax = fig.axes[:2]
    assert time_ax.get_xscale() == time_ax.get_yscale() == bytes_ax.get_yscale() == "log"
    assert "ms" in time_ax.get_ylabel() and "bytes" in bytes_ax.get_ylabel() and "context" in time_ax.get_xlabel()
    assert "cpu" in fig._suptitle.get_text() and "H=2 D=8 m=16" in fig._suptitle.get_text()
    assert len(time_ax.get_legend_handles_labels()[1]) == 3
    assert decode.save_decode_figure(df, tmp_path / "d.png").stat().st_size > 10_000


def test_cli_writes_csv_png_and_summary(tmp_path, capsys):
    argv = ["--decode", "--lengths", "16,32", "--methods", "exact-kv-cache,performer,deltanet", "--heads", "2",
            "--dim-head", "8", "--nb-features", "16", "--min-run-time", "0.002", "--rounds", "2", "--no-progress",
            "--out", str(tmp_path)]
    assert bench_main(argv) == 0
    assert sorted(os.listdir(tmp_path)) == ["decode-cpu-float32.csv", "decode-cpu-float32.png"]
    out = capsys.readouterr().out
    assert "exact-kv-cache" in out and "deltanet" in out and ("crossover" in out)
    assert "decode-cpu-float32.csv" in out and "decode-cpu-float32.png" in out
    df = decode.load_decode_csv(tmp_path / "decode-cpu-float32.csv")
    assert df.attrs["command"].startswith("python -m minilin bench --decode --lengths 16,32 --methods")
    assert set(df["method"]) == {"exact-kv-cache", "performer", "deltanet"} and set(df["context"]) == {16, 32}
    assert bench_main(argv) == 0
    assert "replaces" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_decode_through_python_dash_m(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.run([sys.executable, "-m", "minilin", "bench", "--decode", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "crossover" in proc.stdout
    df = decode.load_decode_csv(tmp_path / "decode-cpu-float32.csv")
    assert df.attrs["command"] == f"python -m minilin bench --decode --quick --out {tmp_path}"
    assert set(df["context"]) == {256, 512, 1024, 2048} and set(df["method"]) == set(decode.DECODE_METHODS)
    ok = df[df["status"] == "ok"]
    assert (ok["state_bytes"] == ok["model_state_bytes"]).all()
