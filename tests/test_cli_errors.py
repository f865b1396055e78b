"""Every user error on the command line is one line on stderr that names the fix, exit code 2, no traceback.

One table of bad invocations (BAD) run in-process through `python -m minilin`'s `main`, and a few of them
through a real `python -m minilin` subprocess. To cover a new command, add rows: (id, argv, text the one
line must contain). `{name}` in an argument is replaced by the path of the prepared file `name` (see
`paths`): tmp (a folder), ckpt (a real checkpoint), empty, random, plain_dict, truncated, text, file.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minilin.__main__ import main
from minilin.model import LMConfig
from minilin.train import TrainConfig, train

ROOT = Path(__file__).resolve().parent.parent

# a seconds-sized run; rows that must fail add their one bad option to it
TINY = ["--steps", "2", "--block-size", "32", "--dim", "32", "--depth", "1", "--heads", "2", "--batch-size", "2",
        "--eval-batches", "1", "--eval-interval", "1", "--device", "cpu", "--no-progress"]

BENCH = ["--lengths", "32", "--model-lengths", "32", "--methods", "exact", "--heads", "2", "--dim-head", "8",
         "--min-run-time", "0.002", "--rounds", "1", "--no-plots", "--no-progress", "--out", "{tmp}/bench"]

DECODE = ["--decode", "--lengths", "16", "--heads", "2", "--dim-head", "8", "--nb-features", "8", "--min-run-time",
          "0.002", "--rounds", "1", "--no-plots", "--no-progress", "--out", "{tmp}/decode"]

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message for a machine without CUDA")

BAD = [
    # train: option values (caught while parsing)
    ("train-attention-unknown", ["train", "--attention", "foo", *TINY], "choose from"),
    ("train-attention-list", ["train", "--attention", "exact,foo", *TINY], "choose from"),
    ("train-steps-0", ["train", *TINY, "--steps", "0"], "--steps"),
    ("train-steps-negative", ["train", *TINY, "--steps", "-5"], "--steps"),
    ("train-steps-text", ["train", *TINY, "--steps", "ten"], "--steps"),
    ("train-batch-size-0", ["train", *TINY, "--batch-size", "0"], "--batch-size"),
    ("train-block-size-0", ["train", *TINY, "--block-size", "0"], "--block-size"),
    ("train-eval-interval-0", ["train", *TINY, "--eval-interval", "0"], "--eval-interval"),
    ("train-ckpt-interval-negative", ["train", *TINY, "--ckpt-interval", "-1"], "--ckpt-interval"),
    ("train-lr-0", ["train", *TINY, "--lr", "0"], "--lr"),
    ("train-heads-not-dividing", ["train", *TINY, "--heads", "3"], "heads"),
    ("train-unknown-option", ["train", "--stpes", "3"], "--stpes"),
    ("train-compare-unknown", ["train", *TINY, "--compare", "exact,foo"], "choose from"),
    ("train-compare-with-out", ["train", *TINY, "--compare", "exact", "--out", "{tmp}/x.pt"], "--out"),
    ("train-step-time-one-model", ["train", *TINY, "--step-time", "sdpa"], "at least two"),
    ("train-step-time-unknown", ["train", *TINY, "--step-time", "sdpa,foo"], "choose from"),
    ("train-step-time-with-compare", ["train", *TINY, "--step-time", "sdpa,exact", "--compare", "exact"],
     "--compare"),
    ("train-rounds-without-step-time", ["train", *TINY, "--rounds", "3"], "--step-time"),
    ("train-rounds-0", ["train", *TINY, "--step-time", "sdpa,exact", "--rounds", "0"], "--rounds"),
    # train: values that are only wrong together or on this machine (caught before the first step)
    ("train-linformer-causal", ["train", *TINY, "--attention", "linformer"], "--objective mlm"),
    ("train-deltanet-masked-lm", ["train", *TINY, "--attention", "deltanet", "--objective", "mlm"],
     "causal by construction"),
    ("train-data-missing", ["train", *TINY, "--data", "{tmp}/missing.txt"], "missing.txt"),
    ("train-data-empty", ["train", *TINY, "--data", "{empty}"], "empty"),
    ("train-data-too-short", ["train", *TINY, "--data", "{text}"], "smaller block_size"),
    pytest.param("train-device-cuda", ["train", *TINY, "--device", "cuda"], "--device cpu", marks=NO_CUDA),
    ("train-device-unknown", ["train", *TINY, "--device", "gpu"], "--device"),
    ("train-out-under-a-file", ["train", *TINY, "--out", "{file}/x.pt"], "--out"),
    ("train-out-is-a-folder", ["train", *TINY, "--out", "{tmp}"], "--out"),
    ("train-resume-missing", ["train", *TINY, "--resume", "{tmp}/missing.pt"], "missing.pt"),
    ("train-resume-empty", ["train", *TINY, "--resume", "{empty}"], "empty"),
    ("train-resume-random", ["train", *TINY, "--resume", "{random}"], "not a minilin checkpoint"),
    ("train-resume-plain-dict", ["train", *TINY, "--resume", "{plain_dict}"], "not a minilin checkpoint"),
    ("train-resume-truncated", ["train", *TINY, "--resume", "{truncated}"], "not a minilin checkpoint"),
    ("train-resume-other-model", ["train", *TINY, "--resume", "{ckpt}", "--dim", "64"], "different model"),
    # sample
    ("sample-ckpt-missing", ["sample", "--ckpt", "{tmp}/missing.pt"], "missing.pt"),
    ("sample-ckpt-folder", ["sample", "--ckpt", "{tmp}"], "folder"),
    ("sample-ckpt-empty", ["sample", "--ckpt", "{empty}"], "empty"),
    ("sample-ckpt-random", ["sample", "--ckpt", "{random}"], "not a minilin checkpoint"),
    # a pickle header naming protocol 124: torch warns before it fails (os.urandom drew one in a CI run)
    ("sample-ckpt-odd-protocol", ["sample", "--ckpt", "{odd_protocol}"], "not a minilin checkpoint"),
    ("sample-ckpt-plain-dict", ["sample", "--ckpt", "{plain_dict}"], "not a minilin checkpoint"),
    ("sample-ckpt-truncated", ["sample", "--ckpt", "{truncated}"], "not a minilin checkpoint"),
    ("sample-tokens-negative", ["sample", "--ckpt", "{ckpt}", "--tokens", "-3"], "--tokens"),
    ("sample-tokens-0", ["sample", "--ckpt", "{ckpt}", "--tokens", "0"], "--tokens"),
    ("sample-top-k-0", ["sample", "--ckpt", "{ckpt}", "--top-k", "0"], "--top-k"),
    ("sample-top-k-negative", ["sample", "--ckpt", "{ckpt}", "--top-k", "-2"], "--top-k"),
    ("sample-temperature-negative", ["sample", "--ckpt", "{ckpt}", "--temperature", "-1"], "--temperature"),
    ("sample-num-samples-0", ["sample", "--ckpt", "{ckpt}", "--num-samples", "0"], "--num-samples"),
    ("sample-prompt-empty", ["sample", "--ckpt", "{ckpt}", "--prompt", ""], "--prompt"),
    ("sample-recurrent-past-block", ["sample", "--ckpt", "{ckpt}", "--tokens", "40", "--recurrent", "yes"],
     "--recurrent no"),
    pytest.param("sample-device-cuda", ["sample", "--ckpt", "{ckpt}", "--device", "cuda"], "--device cpu",
                 marks=NO_CUDA),
    # bench: every value is checked before the sweep starts (BENCH is a sub-second sweep should a row not fail)
    ("bench-methods-unknown", ["bench", *BENCH, "--methods", "foo"], "performer-causal"),
    ("bench-methods-one-unknown", ["bench", *BENCH, "--methods", "exact,favor"], "unknown method 'favor'"),
    ("bench-methods-peer-of-ours-only", ["bench", *BENCH, "--methods", "peer-exact"], "drop 'peer-'"),
    ("bench-methods-linformer-causal", ["bench", *BENCH, "--methods", "linformer-causal-k64"], "cannot be causal"),
    ("bench-methods-linformer-no-k", ["bench", *BENCH, "--methods", "linformer"], "linformer-k256"),
    ("bench-methods-gated-not-causal", ["bench", *BENCH, "--methods", "gated-deltanet"], "gated-deltanet-causal"),
    ("bench-methods-empty", ["bench", *BENCH, "--methods", ","], "--methods"),
    pytest.param("bench-methods-triton-on-cpu", ["bench", *BENCH, "--methods", "triton-linear-causal", "--device", "cpu"],
                 "TRITON_INTERPRET=1", marks=pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                                                 reason="the interpreter is on: the kernel can run")),
    pytest.param("bench-device-cuda", ["bench", *BENCH, "--device", "cuda"], "--device cpu", marks=NO_CUDA),
    ("bench-device-unknown", ["bench", *BENCH, "--device", "gpu"], "--device"),
    ("bench-lengths-text", ["bench", *BENCH, "--lengths", "abc"], "--lengths: lengths are positive whole numbers"),
    ("bench-lengths-0", ["bench", *BENCH, "--lengths", "0"], "at least 1"),
    ("bench-lengths-negative", ["bench", *BENCH, "--lengths", "-5"], "--lengths"),
    ("bench-lengths-ellipsis", ["bench", *BENCH, "--lengths", "256,...,4096"], "256,512,...,16384"),
    ("bench-model-lengths-text", ["bench", *BENCH, "--model-lengths", "1k"], "--model-lengths"),
    ("bench-dtype-unknown", ["bench", *BENCH, "--dtype", "float8"], "--dtype"),
    ("bench-batch-text", ["bench", *BENCH, "--batch", "two"], "--batch"),
    ("bench-heads-0", ["bench", *BENCH, "--heads", "0"], "--heads"),
    ("bench-dim-head-negative", ["bench", *BENCH, "--dim-head", "-8"], "--dim-head"),
    ("bench-nb-features-0", ["bench", *BENCH, "--nb-features", "0"], "--nb-features"),
    ("bench-rounds-0", ["bench", *BENCH, "--rounds", "0"], "--rounds"),
    ("bench-min-run-time-0", ["bench", *BENCH, "--min-run-time", "0"], "--min-run-time"),
    ("bench-max-seconds-text", ["bench", *BENCH, "--max-seconds", "soon"], "--max-seconds"),
    ("bench-max-memory-text", ["bench", *BENCH, "--max-memory", "lots"], "4GiB"),
    ("bench-passes-unknown", ["bench", *BENCH, "--passes", "backward"], "--passes"),
    ("bench-threads-0", ["bench", *BENCH, "--threads", "0"], "--threads"),
    ("bench-seed-negative", ["bench", *BENCH, "--seed", "-1"], "--seed"),
    ("bench-unknown-option", ["bench", "--lenghts", "256"], "--lenghts"),
    ("bench-out-is-a-file", ["bench", *BENCH, "--out", "{file}"], "--out"),
    ("bench-out-under-a-file", ["bench", *BENCH, "--out", "{file}/x"], "--out"),
    # bench --decode: its methods are the decoding ones; sweep-only options are refused, not ignored
    ("bench-decode-methods-not-decodable", ["bench", *DECODE, "--methods", "linformer-k256"], "decoding methods are"),
    ("bench-decode-methods-sweep-name", ["bench", *DECODE, "--methods", "exact-kv-cache,performer-causal"],
     "'performer-causal' cannot be decoded"),
    ("bench-decode-methods-empty", ["bench", *DECODE, "--methods", ","], "--methods"),
    ("bench-decode-passes", ["bench", *DECODE, "--passes", "fwd"], "--passes does not apply to --decode"),
    ("bench-decode-model-lengths", ["bench", *DECODE, "--model-lengths", "32"], "drop --model-lengths"),
    ("bench-decode-lengths-0", ["bench", *DECODE, "--lengths", "0"], "at least 1"),
    pytest.param("bench-decode-device-cuda", ["bench", *DECODE, "--device", "cuda"], "--device cpu", marks=NO_CUDA),
    ("bench-decode-out-is-a-file", ["bench", *DECODE, "--out", "{file}"], "--out"),
]


def _row_id(row):
    return row.values[0] if hasattr(row, "values") else row[0]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """The files the table refers to: a real checkpoint (learned positions, block_size 32) and bad ones."""
    tmp = tmp_path_factory.mktemp("cli")
    ckpt = tmp / "lm.pt"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(TrainConfig(model=LMConfig(block_size=32, dim=32, depth=1, heads=2), steps=2, batch_size=2,
                          eval_batches=1, eval_interval=1, device="cpu", out=str(ckpt)))
    finally:
        torch.set_num_threads(threads)
    (tmp / "empty.pt").write_bytes(b"")
    (tmp / "random.pt").write_bytes(os.urandom(4096))
    (tmp / "odd_protocol.pt").write_bytes(b"\x80\x7c" + bytes(range(256)) * 4)
    torch.save({"weights": torch.zeros(3)}, tmp / "plain_dict.pt")
    data = ckpt.read_bytes()
    (tmp / "truncated.pt").write_bytes(data[: len(data) // 2])
    (tmp / "short.txt").write_text("too short for a block of 32 bytes\n")
    (tmp / "a_file").write_text("a file, not a folder")
    return {"tmp": str(tmp), "ckpt": str(ckpt), "empty": str(tmp / "empty.pt"), "random": str(tmp / "random.pt"),
            "odd_protocol": str(tmp / "odd_protocol.pt"),
            "plain_dict": str(tmp / "plain_dict.pt"), "truncated": str(tmp / "truncated.pt"),
            "text": str(tmp / "short.txt"), "file": str(tmp / "a_file")}


def check_one_line(code, out, err, command, needle):
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and "weights_only" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"python -m minilin {command}: error: "), lines[0]
    assert needle in lines[0], lines[0]
    assert "train loss" not in out, "the run started before the error was found"


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name, argv, needle", BAD, ids=[_row_id(r) for r in BAD])
def test_bad_invocation_is_one_line_and_exit_2(name, argv, needle, paths, capsys, monkeypatch, tmp_path,
                                               one_thread):
    monkeypatch.chdir(tmp_path)  # a run that wrongly starts writes its checkpoint here, not into the repo
    code = main([a.format(**paths) for a in argv])
    out, err = capsys.readouterr()
    check_one_line(code, out, err, argv[0], needle)


SUBPROCESS_ROWS = ["train-steps-0", "train-data-missing", "sample-ckpt-random", "sample-ckpt-odd-protocol",
                   "bench-lengths-text"]


@pytest.mark.parametrize("name", SUBPROCESS_ROWS)
def test_bad_invocation_through_python_dash_m(name, paths, tmp_path):
    _, argv, needle = next(r for r in BAD if _row_id(r) == name)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.run([sys.executable, "-m", "minilin", *[a.format(**paths) for a in argv]],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    check_one_line(proc.returncode, proc.stdout, proc.stderr, argv[0], needle)
