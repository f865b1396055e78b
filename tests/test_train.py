"""Training loop: schedule, optimizer groups, evaluation, atomic checkpoints, bit-identical resume, the CLI,
and a 2-process DDP run (gloo, CPU) under torchrun. (Bad command lines: tests/test_cli_errors.py.)"""
import json
import math
import os
import pickle
import shutil
import signal
import time
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from minilin.__main__ import main as minilin_main
from minilin.checkpoint import CheckpointError, check_writable
from minilin.cli import UsageError
from minilin.data import AssociativeRecall, ByteCorpus, decode, encode
from minilin.device import resolve_device
from minilin.model import LMConfig, TinyLM
from minilin.sample import generate as sample_generate
from minilin.sample import main as sample_main
from minilin.variants import VARIANTS
from minilin.train import (
    TrainConfig,
    config_from_args,
    build_parser,
    evaluate,
    load_checkpoint,
    load_model,
    lr_at,
    main,
    make_optimizer,
    save_checkpoint,
    train,
)

ROOT = Path(__file__).resolve().parent.parent


# Models this small gain nothing from intra-op threads, and on a busy runner spinning OpenMP threads made
# these tests 10-40x slower (measured): one thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def small(**kw):
    """A seconds-sized run: 2 layers, d=32, L=32, batch 8."""
    model = LMConfig(**{**dict(block_size=32, dim=32, depth=2, heads=4), **kw.pop("model", {})})
    return TrainConfig(**{**dict(model=model, steps=12, batch_size=8, lr=3e-3, warmup=3, eval_interval=4,
                                 eval_batches=2, device="cpu"), **kw})


@pytest.fixture(scope="module")
def corpus():
    return ByteCorpus(block_size=32)


def test_schedule_warms_up_then_decays_to_min_lr():
    kw = dict(lr=1e-3, steps=100, warmup=10, min_lr=1e-4)
    lrs = [lr_at(s, **kw) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)  # linear: (s + 1) / warmup
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[55] == pytest.approx(0.5 * (1e-3 + 1e-4))  # cosine midpoint
    assert lr_at(100, **kw) == pytest.approx(1e-4) and min(lrs) >= 1e-4


def test_optimizer_groups_decay_matrices_and_scale_linformer_projections():
    model = TinyLM(LMConfig(attention="linformer", causal=False, block_size=32, dim=32, proj_len=8))
    opt = make_optimizer(model, TrainConfig(ef_lr_scale=0.25, weight_decay=0.1))
    by_scale = {g["lr_scale"]: g for g in opt.param_groups if g["weight_decay"] > 0}
    ef = {id(p) for n, p in model.named_parameters() if n.split(".")[-1] in ("E", "F")}
    assert {id(p) for p in by_scale[0.25]["params"]} == ef and len(ef) == 4
    no_decay = [g for g in opt.param_groups if g["weight_decay"] == 0][0]["params"]
    assert all(p.ndim == 1 for p in no_decay) and len(no_decay) > 0
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))


def test_training_lowers_the_loss_and_evaluates_bits(corpus):
    h = train(small(steps=30, eval_interval=10), data=corpus)
    assert h.step == list(range(1, 31)) and h.eval_step == [10, 20, 30]
    assert sum(h.loss[-5:]) / 5 < h.loss[0] - 1.0  # from ln 256 = 5.5 nats to below 4.5 in 30 steps
    assert h.val_bits[-1] == pytest.approx(h.val_loss[-1] / math.log(2))
    assert h.val_bits[-1] < h.val_bits[0] and 0 < h.val_acc[-1] < 1
    assert h.time == sorted(h.time) and h.step_time() > 0
    assert isinstance(h.model, TinyLM) and h.params == sum(p.numel() for p in h.model.parameters())


def test_default_warmup_and_min_lr_follow_steps_and_lr(corpus):
    h = train(small(steps=20, warmup=None, min_lr=None, lr=2e-3, eval_interval=20, eval_batches=1), data=corpus)
    assert h.lr[0] == pytest.approx(2e-3 / 2) and h.lr[1] == pytest.approx(2e-3)  # warm-up = 20 / 10 steps
    assert h.lr[-1] == pytest.approx(lr_at(19, lr=2e-3, steps=20, warmup=2, min_lr=2e-4))
    assert min(h.lr[2:]) > 2e-4 and h.lr == sorted(h.lr[:2]) + sorted(h.lr[2:], reverse=True)


def test_evaluate_uses_the_same_batches_every_time(corpus):
    torch.manual_seed(0)
    model = TinyLM(small().model)
    a, b = evaluate(model, corpus, batches=3, batch_size=4), evaluate(model, corpus, batches=3, batch_size=4)
    assert a == b
    assert evaluate(model, corpus, batches=3, batch_size=4, seed=1) != a


def test_checkpoint_write_is_atomic(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"w": torch.arange(3)}, path)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        save_checkpoint({"w": torch.arange(5), "bad": lambda: 0}, path)  # fails half-way through torch.save
    assert torch.equal(load_checkpoint(path)["w"], torch.arange(3))  # the old checkpoint is intact
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # and no temporary file is left behind


def test_ctrl_c_during_a_save_is_raised_after_it(tmp_path, monkeypatch):
    """SIGINT inside torch.save would break its zip writer (a RuntimeError, exit 1): it is held to the end."""
    path, real_save = tmp_path / "ckpt.pt", torch.save
    save_checkpoint({"w": torch.arange(3)}, path)

    def interrupted_save(obj, f, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)          # Ctrl-C arrives while the file is being written
        real_save(obj, f, *args, **kwargs)
    monkeypatch.setattr(torch, "save", interrupted_save)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)   # as `python -m minilin` runs
    try:
        with pytest.raises(KeyboardInterrupt):
            save_checkpoint({"w": torch.arange(5)}, path)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert torch.equal(load_checkpoint(path)["w"], torch.arange(5))   # the save finished before the interrupt
    assert os.listdir(tmp_path) == ["ckpt.pt"]


class NotAWeight:
    pass


def test_checkpoint_load_is_weights_only(tmp_path):
    torch.save({"obj": NotAWeight()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="not a minilin checkpoint") as err:
        load_checkpoint(tmp_path / "evil.pt")
    assert "weights_only" not in str(err.value)  # torch's advice to unpickle anything is not ours


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, corpus):
    # Performer (redraws every 3 forwards: counters and projection in the state), exact attention, and
    # dropout (the global RNG) all have to be restored for the curves to agree to the last bit.
    config = small(model=dict(attention=["performer", "exact"], redraw_interval=3, dropout=0.1,
                              positions="rope"), out=str(tmp_path / "lm.pt"))
    full = train(replace(config, out=None), data=corpus)
    part = train(config, data=corpus, stop_at=5)
    assert part.step == [1, 2, 3, 4, 5]
    ckpt = load_checkpoint(tmp_path / "lm.pt")
    assert ckpt["step"] == 5 and int(ckpt["model"]["blocks.0.attn.redraws"]) == 1
    resumed = train(config, data=corpus, resume=tmp_path / "lm.pt")
    assert resumed.loss == full.loss  # exact float equality, every step
    assert resumed.val_loss == full.val_loss and resumed.lr == full.lr
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    # a run that did not restore the RNG state would differ: check the test can tell
    fresh = train(replace(config, out=None, seed=1), data=corpus)
    assert fresh.loss != full.loss
    with pytest.raises(ValueError, match="different model"):
        train(replace(config, model=replace(config.model, dim=64)), data=corpus, resume=tmp_path / "lm.pt")


def test_bidirectional_model_cannot_train_on_next_byte_targets(corpus):
    with pytest.raises(ValueError, match="causal model"):
        train(small(model=dict(attention="linformer", causal=False)), data=corpus)
    # on the masked-LM objective it trains, and Linformer's E/F move at their own rate
    h = train(small(model=dict(attention="linformer", causal=False, proj_len=8), objective="mlm", steps=4,
                    ef_lr_scale=0.5))
    assert len(h.loss) == 4 and all(math.isfinite(v) for v in h.loss)


def test_synthetic_task_trains_exact_and_linformer():
    task = AssociativeRecall(seq_len=32, n_pairs=4)
    for attention, causal in (("exact", True), ("linformer", False)):
        h = train(small(model=dict(attention=attention, causal=causal, proj_len=8), steps=4), data=task)
        assert 0.0 <= h.val_acc[-1] <= 1.0 and len(h.val_bits) == 1


def test_cli_train_then_sample(tmp_path, capsys):
    ckpt, hist = tmp_path / "lm.pt", tmp_path / "h.json"
    argv = ["--steps", "6", "--block-size", "32", "--dim", "32", "--batch-size", "4", "--eval-interval", "3",
            "--eval-batches", "1", "--attention", "performer", "--positions", "rope", "--device", "cpu",
            "--out", str(ckpt), "--history", str(hist), "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "final val bits/byte" in out.out and out.err == ""
    assert json.loads(hist.read_text())["step"] == [1, 2, 3, 4, 5, 6]
    model, config = load_model(ckpt)
    assert config.model.attention == "performer" and not model.training
    assert sample_main(["--ckpt", str(ckpt), "--prompt", "def ", "--tokens", "12", "--seed", "3"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("def ") and len(text.encode("utf-8", errors="surrogateescape")) >= 4
    # --resume takes the checkpoint's config; --steps extends the run
    assert main(["--resume", str(ckpt), "--steps", "8", "--out", str(ckpt), "--no-progress"]) == 0
    assert load_checkpoint(ckpt)["step"] == 8


def test_cli_derives_causality_from_the_objective():
    parse = build_parser().parse_args
    assert not config_from_args(parse(["--objective", "mlm", "--attention", "linformer"])).model.causal
    assert not config_from_args(parse(["--data", "recall", "--attention", "exact,linformer"])).model.causal
    assert config_from_args(parse(["--data", "recall", "--attention", "performer"])).model.causal
    cfg = config_from_args(parse(["--attention", "performer,exact", "--proj-len", "8,16", "--lr", "1e-3"]))
    assert cfg.model.attention == ["performer", "exact"] and cfg.model.proj_len == [8, 16] and cfg.lr == 1e-3


# ---- issue 11: resume target, unwritable --out, unreadable checkpoints, sampling past block_size ----------

TINY = ["--steps", "2", "--block-size", "32", "--dim", "32", "--depth", "1", "--heads", "2", "--batch-size", "2",
        "--eval-batches", "1", "--eval-interval", "1", "--device", "cpu", "--no-progress"]


def test_resume_writes_to_the_checkpoint_it_resumed_from(tmp_path, capsys):
    original, copy = tmp_path / "lm.pt", tmp_path / "copy.pt"
    assert main([*TINY, "--out", str(original)]) == 0
    shutil.copy(original, copy)
    capsys.readouterr()
    assert main(["--resume", str(copy), "--steps", "4", "--no-progress"]) == 0
    assert load_checkpoint(copy)["step"] == 4  # continued in the file it came from ...
    assert load_checkpoint(original)["step"] == 2  # ... not in the `out` stored inside it
    assert f"checkpoint: {copy}" in capsys.readouterr().out
    other = tmp_path / "other.pt"  # --out still says otherwise
    assert main(["--resume", str(copy), "--steps", "5", "--out", str(other), "--no-progress"]) == 0
    assert load_checkpoint(other)["step"] == 5 and load_checkpoint(copy)["step"] == 4


class CountingCorpus(ByteCorpus):
    drawn = 0

    def batch(self, split, *args, **kw):
        if split == "train":
            self.drawn += 1
        return super().batch(split, *args, **kw)


@pytest.mark.parametrize("where", ["under-a-file", "a-folder", "unwritable"])
def test_out_that_cannot_be_written_fails_before_the_first_step(tmp_path, where):
    (tmp_path / "a_file").write_text("not a folder")
    out = {"under-a-file": tmp_path / "a_file" / "x.pt", "a-folder": tmp_path,
           "unwritable": tmp_path / "locked" / "lm.pt"}[where]
    if where == "unwritable":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder anyway")
        out.parent.mkdir()
        out.parent.chmod(0o500)
    data = CountingCorpus(block_size=32)
    with pytest.raises(ValueError, match="out") as err:
        train(small(out=str(out)), data=data)
    assert data.drawn == 0, "the error came after training had started"
    assert str(out) in str(err.value) and "\n" not in str(err.value)
    assert sorted(os.listdir(tmp_path)) in (["a_file"], ["a_file", "locked"])  # the check leaves nothing behind
    with pytest.raises(ValueError):
        check_writable(out)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "lm.pt"
    train(TrainConfig(model=LMConfig(block_size=32, dim=32, depth=1, heads=2), steps=2, batch_size=2,
                      eval_batches=1, eval_interval=1, device="cpu", out=str(path)))
    return path


@pytest.mark.parametrize("kind", ["empty", "random", "plain-dict", "truncated", "pickled-object", "folder"])
def test_unreadable_checkpoint_is_one_clear_error(tmp_path, tiny_checkpoint, kind):
    path = tmp_path / f"{kind}.pt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "random":
        path.write_bytes(os.urandom(2048))
    elif kind == "plain-dict":
        torch.save({"weights": torch.zeros(2)}, path)
    elif kind == "truncated":
        path.write_bytes(tiny_checkpoint.read_bytes()[:3000])
    elif kind == "pickled-object":
        torch.save({"format": "minilin-lm-1", "obj": NotAWeight()}, path)
    else:
        path.mkdir()
    for load in (load_model, lambda p: train(small(), resume=p)):
        with pytest.raises(CheckpointError) as err:
            load(path)
        message = str(err.value)
        assert str(path) in message and "\n" not in message and "weights_only" not in message, message


def test_killed_save_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "lm.pt"

    def interrupted_save(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # Ctrl-C in the middle of torch.save

    monkeypatch.setattr(torch, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint({"w": torch.zeros(2)}, path)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    # a save killed outright (SIGKILL, power cut) cannot clean up: the next save into the folder does
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / f".lm.pt.tmp{int(dead.stdout)}").write_bytes(b"left by a killed save")
    (tmp_path / f".other.pt.tmp{os.getpid()}").write_bytes(b"another file's save, in flight")
    save_checkpoint({"w": torch.zeros(2)}, path)
    assert sorted(os.listdir(tmp_path)) == [f".other.pt.tmp{os.getpid()}", "lm.pt"]


SLOW_SAVE = """
import sys, time, torch
from minilin.checkpoint import save_checkpoint
def slow(obj, f):
    f.write(b"x" * 1000); f.flush(); print("saving", flush=True); time.sleep(60)
torch.save = slow
save_checkpoint({"w": torch.zeros(2)}, sys.argv[1])
"""


def test_terminated_save_leaves_no_temporary_file(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SAVE, str(tmp_path / "lm.pt")], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "saving"
        assert any(name.startswith(".lm.pt.tmp") for name in os.listdir(tmp_path))
        proc.send_signal(signal.SIGTERM)  # what torchrun and job schedulers send
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0 and os.listdir(tmp_path) == []


def test_sample_past_block_size_with_learned_positions(tiny_checkpoint, capsys):
    # block_size 32, learned positions: the recurrent decoder cannot go past position 31
    assert sample_main(["--ckpt", str(tiny_checkpoint), "--tokens", "40", "--temperature", "0", "--no-progress"]) == 0
    out = capsys.readouterr()
    assert len(out.out.encode("utf-8", errors="surrogateescape")) >= 41  # newline prompt + 40 bytes (+ print's \n)
    notes = out.err.strip().splitlines()
    assert len(notes) == 1 and "block_size=32" in notes[0] and "window" in notes[0], out.err
    # the windowed decoder is what the fallback runs: the same text as asking for it
    assert sample_main(["--ckpt", str(tiny_checkpoint), "--tokens", "40", "--temperature", "0",
                        "--recurrent", "no", "--no-progress"]) == 0
    assert capsys.readouterr() == (out.out, "")
    # ... and the same as one call to the model's windowed decoder (the command decodes in chunks, for its bar)
    model, _ = load_model(tiny_checkpoint)
    whole = model.generate(torch.tensor([[10]]), 40, temperature=0, recurrent=False)
    assert out.out == decode(whole[0]) + "\n"
    seeded = [dict(temperature=0.8, generator=torch.Generator().manual_seed(3)) for _ in range(2)]
    chunked = sample_generate(model, torch.tensor([[10]]), 40, recurrent=False, progress=False, **seeded[0])
    assert torch.equal(chunked, model.generate(torch.tensor([[10]]), 40, recurrent=False, **seeded[1]))
    if not os.environ.get("TQDM_DISABLE"):  # the windowed decoder shows its progress on stderr
        assert sample_main(["--ckpt", str(tiny_checkpoint), "--tokens", "40", "--recurrent", "no"]) == 0
        assert "sample: 100%" in capsys.readouterr().err
    # within block_size the recurrent default stays, silently
    assert sample_main(["--ckpt", str(tiny_checkpoint), "--tokens", "20"]) == 0
    assert capsys.readouterr().err == ""


def test_train_then_sample_with_the_default_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert minilin_main(["train", *TINY]) == 0
    assert "checkpoint: checkpoints/lm.pt" in capsys.readouterr().out
    assert load_checkpoint(tmp_path / "checkpoints" / "lm.pt")["step"] == 2
    assert minilin_main(["sample", "--ckpt", "checkpoints/lm.pt", "--tokens", "20", "--prompt", "def "]) == 0
    assert capsys.readouterr().out.startswith("def ")
    assert minilin_main(["train", *TINY, "--no-save"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["checkpoints"]


# every registry variant a next-byte LM can decode with, one state per layer (retention, GLA, the delta rules too)
DECODERS = [n for n, v in VARIANTS.items() if v.causal and v.recurrent]


@pytest.mark.parametrize("attention", DECODERS)
def test_train_then_sample_equals_the_causal_forward(tmp_path, capsys, attention):
    # `train` writes a checkpoint; `sample`'s recurrent greedy text is the text of re-running the causal forward
    # on every prefix, and the step logits are the forward's (float32: round-off only)
    ckpt = tmp_path / "lm.pt"
    assert minilin_main(["train", *TINY, "--steps", "30", "--attention", attention, "--out", str(ckpt)]) == 0
    assert load_checkpoint(ckpt)["step"] == 30
    capsys.readouterr()
    assert sample_main(["--ckpt", str(ckpt), "--prompt", "def ", "--tokens", "24", "--temperature", "0",
                        "--recurrent", "yes", "--no-progress"]) == 0
    model, config = load_model(ckpt)
    assert config.model.attention == attention and model.can_step()
    rerun = model.generate(encode("def ")[None], 24, temperature=0, recurrent=False)
    assert capsys.readouterr().out == decode(rerun[0]) + "\n"
    with torch.no_grad():
        state, steps = None, []
        for t in range(rerun.shape[1]):
            logits, state = model.step(rerun[:, t], state)
            steps.append(logits)
        torch.testing.assert_close(torch.stack(steps, dim=1), model(rerun)[0], rtol=0, atol=1e-4)


def test_compare_writes_no_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert minilin_main(["train", *TINY, "--compare", "exact,performer"]) == 0
    table = capsys.readouterr().out
    assert "val bits/byte" in table and "performer" in table
    assert os.listdir(tmp_path) == []


def test_progress_bar_respects_tqdm_disable(tmp_path, capsys):
    argv = [*[a for a in TINY if a != "--no-progress"], "--no-save"]
    if not os.environ.get("TQDM_DISABLE"):
        assert main(argv) == 0
        assert "train: 100%" in capsys.readouterr().err  # the bar, on stderr
    # tqdm reads TQDM_DISABLE when it is imported (and an explicit disable=False would override it): a subprocess
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    hidden = subprocess.run([sys.executable, "-m", "minilin", "train", *argv], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=120)
    assert hidden.returncode == 0 and hidden.stderr == "", hidden.stderr
    assert "final val bits/byte" in hidden.stdout


@pytest.mark.parametrize("field, value, flag", [
    ("steps", 0, "--steps"), ("steps", -5, "--steps"), ("batch_size", 0, "--batch-size"),
    ("eval_interval", 0, "--eval-interval"), ("eval_batches", 0, "--eval-batches"),
    ("ckpt_interval", -1, "--ckpt-interval"), ("lr", 0.0, "--lr"), ("grad_clip", -1.0, "--grad-clip"),
    ("objective", "mask", "--objective"), ("arch", "gpt", "--arch"), ("data", "no/such/file.txt", "--data"),
    ("model.block_size", 0, "--block-size"), ("model.heads", 3, "--heads"), ("model.attention", "foo", "--attention"),
    ("model.dropout", 1.0, "--dropout"),
])
def test_config_validate_names_the_field_and_the_fix(field, value, flag):
    if field.startswith("model."):
        config = small(model={field[6:]: value})
    else:
        config = small(**{field: value})
    with pytest.raises(ValueError) as err:
        config.validate()
    assert field.split(".")[-1] in str(err.value) and flag in str(err.value), str(err.value)
    with pytest.raises(ValueError):  # the Python API checks the same way, before any step
        train(config)


def test_zero_batch_size_is_not_blamed_on_the_learning_rate():
    with pytest.raises(ValueError, match="batch_size") as err:
        train(small(batch_size=0))
    assert "learning rate" not in str(err.value)


def test_resolve_device():
    assert resolve_device("auto") == torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cpu"):
            resolve_device("cuda")
    else:
        assert resolve_device("cuda", local_rank=0) == torch.device("cuda", 0)
        with pytest.raises(ValueError, match="devices"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")


DDP_SCRIPT = """
import sys, torch
from minilin.train import TrainConfig, train
from minilin.model import LMConfig
cfg = TrainConfig(model=LMConfig(block_size=32, dim=32, depth=2, heads=4, attention=["performer", "exact"],
                                 redraw_interval=2, seed=5),
                  steps=int(sys.argv[2]), batch_size=8, warmup=2, eval_interval=4, eval_batches=2, device="cpu")
h = train(cfg)
rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else int(__import__("os").environ["RANK"])
torch.save({"state": h.model.state_dict(), "loss": h.loss, "val": h.val_loss}, f"{sys.argv[1]}/rank{rank}.pt")
"""


@pytest.mark.distributed
def test_ddp_two_processes_agree(tmp_path):
    script = tmp_path / "ddp_run.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(script), str(tmp_path), "16"]
    # a session of its own: on a timeout the whole group (torchrun and both workers) is killed, no orphans
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"torchrun did not finish in 180 s:\n{out[-2000:]}\n{err[-4000:]}")
    assert proc.returncode == 0, out[-2000:] + err[-4000:]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    for name, a in r0["state"].items():  # parameters AND buffers (Performer's projection, counters)
        assert torch.equal(a, r1["state"][name]), name
    assert int(r0["state"]["blocks.0.attn.redraws"]) == 7  # 16 forwards, redraw before every 2nd: 7 redraws
    initial = TinyLM(LMConfig(block_size=32, dim=32, attention=["performer", "exact"], seed=5))
    assert not torch.equal(r0["state"]["blocks.0.attn.projection"], initial.blocks[0].attn.projection)
    assert r0["loss"] == r1["loss"]  # the logged loss is the mean over ranks
    assert sum(r0["loss"][-3:]) / 3 < r0["loss"][0] - 0.5
    assert r0["val"] == r1["val"]


# ---- recipes and the fair comparison ----------------------------------------------------------------------

def test_recipes_cosine_is_the_default_and_plain_is_adamw_at_a_constant_rate():
    from minilin.train.config import RECIPES
    assert TrainConfig().with_recipe("cosine") == TrainConfig()  # the default config is the "cosine" recipe
    plain = TrainConfig(lr=1e-2).with_recipe("plain")
    adamw = torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults
    assert (plain.weight_decay, (plain.beta1, plain.beta2)) == (adamw["weight_decay"], adamw["betas"])
    assert plain.grad_clip == 0 and set(RECIPES) == {"cosine", "plain"}
    assert {lr_at(s, lr=plain.lr, steps=50, warmup=plain.warmup, min_lr=plain.min_lr) for s in range(50)} == {1e-2}
    assert TrainConfig().with_recipe("plain", lr=1e-3).min_lr == 1e-3  # constant at the rate asked for
    with pytest.raises(ValueError, match="choose from cosine, plain"):
        TrainConfig().with_recipe("adam")


def test_recipe_on_the_command_line_and_explicit_options_override_it():
    parse = lambda *a: config_from_args(build_parser().parse_args(list(a)))  # noqa: E731
    assert parse("--recipe", "plain") == TrainConfig().with_recipe("plain")
    assert parse("--recipe", "cosine") == TrainConfig()
    c = parse("--recipe", "plain", "--lr", "1e-2", "--weight-decay", "0.2")
    assert (c.lr, c.min_lr, c.warmup, c.weight_decay, c.grad_clip) == (1e-2, 1e-2, 0, 0.2, 0.0)


def test_compare_sweeps_every_model_over_the_same_recipes_and_seeds(corpus):
    from minilin.train.compare import compare, summarize
    seen = []
    rows = compare(["exact", "torch-encoder"], small(steps=3, eval_interval=3), recipes=["cosine", "plain"],
                   lrs=[1e-3, 3e-3], seeds=[0, 1], data=corpus, on_row=seen.append)
    assert len(rows) == 2 * 2 * 2 * 2 and seen == rows
    keys = {(r["recipe"], r["lr"], r["seed"]) for r in rows}
    assert {(r["model"], r["recipe"], r["lr"], r["seed"]) for r in rows} == {(m, *k) for m in ("exact", "torch-encoder")
                                                                                for k in keys}
    assert all(r["status"] == "ok" and math.isfinite(r["val_bits_per_byte"]) for r in rows)
    # a seed fixes the batches: the same model, recipe and seed twice gives the same number
    again = compare(["exact"], small(steps=3, eval_interval=3), recipes=["plain"], lrs=[3e-3], seeds=[1], data=corpus)
    same = [r for r in rows if (r["model"], r["recipe"], r["lr"], r["seed"]) == ("exact", "plain", 3e-3, 1)]
    assert again[0]["val_bits_per_byte"] == same[0]["val_bits_per_byte"]
    summary = {s["model"]: s for s in summarize(rows)}
    for name, s in summary.items():  # the best recipe is the lowest mean over its seeds
        by_point = {}
        for r in rows:
            if r["model"] == name:
                by_point.setdefault(f"{r['recipe']} lr={r['lr']:g}", []).append(r["val_bits_per_byte"])
        assert s["recipe"] == min(by_point, key=lambda k: sum(by_point[k])) and s["n"] == 2
        assert s["lo"] <= s["mean"] <= s["hi"]


def test_summary_marks_overlapping_spreads_as_ties_and_never_picks_a_diverged_recipe():
    from minilin.train.compare import summarize
    def row(model, bits, recipe="plain", lr=1e-3, status="ok"):
        return {"model": model, "recipe": recipe, "lr": lr, "val_bits_per_byte": bits, "params": 1,
                "ms_per_step": 1.0, "status": status}
    rows = [row("a", 2.00), row("a", 2.10), row("b", 2.05), row("b", 2.20), row("c", 2.30), row("c", 2.40),
            row("a", 1.0), row("a", math.inf, lr=1e-2, status="diverged"), row("a", 1.5, lr=1e-2)]
    s = {x["model"]: x for x in summarize(rows)}
    assert s["a"]["recipe"] == "plain lr=0.001" and s["a"]["n"] == 3 and s["a"]["verdict"] == "best"
    assert s["b"]["verdict"] == "tie" and s["c"]["verdict"] == "worse"
    assert s["a"]["std"] == pytest.approx(torch.tensor([2.0, 2.1, 1.0]).std().item())


def test_compare_csv_has_a_row_per_run_under_a_command_machine_date_header(tmp_path, capsys):
    from minilin.train.compare import CSV_FIELDS, csv_rows
    path = tmp_path / "sub" / "sweep.csv"
    assert main([*TINY, "--compare", "exact,torch-encoder", "--quick", "--seeds", "2", "--csv", str(path)]) == 0
    out = capsys.readouterr().out
    assert "cosine lr=0.01" in out and "vs best" in out
    lines = path.read_text().splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == ["# command", "# machine", "# date", "# sweep"]
    assert "--compare exact,torch-encoder --quick" in lines[0] and lines[4] == ",".join(CSV_FIELDS)
    rows = csv_rows(path)
    assert [(r["model"], r["recipe"], r["seed"]) for r in rows] == [
        ("exact", "cosine", 0), ("torch-encoder", "cosine", 0), ("exact", "cosine", 1), ("torch-encoder", "cosine", 1)]
    assert all(r["val_bits_per_byte"] > 0 and r["ms_per_step"] > 0 and r["lr"] == 1e-2 for r in rows)
    # the full sweep: both recipes at each rate of --lrs
    assert main([*TINY, "--compare", "exact", "--lrs", "1e-3,2e-3", "--seeds", "1", "--csv", str(path)]) == 0
    swept = {(r["recipe"], r["lr"]) for r in csv_rows(path)}
    assert swept == {(a, b) for a in ("cosine", "plain") for b in (1e-3, 2e-3)}


@pytest.mark.parametrize("argv, needle", [
    (["--csv", "x.csv"], "belong to --compare"), (["--quick"], "belong to --compare"),
    (["--compare", "exact", "--quick", "--lrs", "1e-3"], "drop --lrs"),
    (["--recipe", "adam"], "unknown recipe 'adam'"), (["--compare", "exact", "--seeds", "0"], "positive")])
def test_compare_options_misused_are_one_line_errors(argv, needle):
    with pytest.raises(UsageError, match=needle):
        main([*TINY, *argv])


def test_step_time_interleaves_models_and_reports_ratios_to_the_first(corpus, monkeypatch, capsys):
    from minilin.train import steptime
    calls = []
    real_build = steptime.build_model

    def counting_build(model_config, arch):  # record each training step's model by wrapping forward
        model = real_build(model_config, arch)
        name = arch if arch != "tinylm" else model_config.attention
        forward = model.forward
        model.forward = lambda *a, **k: (calls.append(name), forward(*a, **k))[1]
        return model
    monkeypatch.setattr(steptime, "build_model", counting_build)
    result = steptime.step_times(["exact", "torch-encoder"], small(), rounds=3, steps=2, data=corpus)
    # one warm-up step each, then 3 rounds x 2 steps each; the order rotates every round
    assert calls == ["exact", "torch-encoder"] + ["exact"] * 2 + ["torch-encoder"] * 2 + \
        ["torch-encoder"] * 2 + ["exact"] * 2 + ["exact"] * 2 + ["torch-encoder"] * 2
    assert result["exact"]["ratio"] == 1.0 and result["exact"]["ratio_iqr"] == (1.0, 1.0)
    r = result["torch-encoder"]
    assert r["ms"] > 0 and r["ms_iqr"][0] <= r["ms"] <= r["ms_iqr"][1] and r["ratio_iqr"][0] <= r["ratio"]
    monkeypatch.undo()
    assert main([*TINY, "--step-time", "sdpa,exact", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "time / sdpa" in out and "2 interleaved rounds" in out and out.count("[") >= 4
