"""Training loop: schedule, optimizer groups, evaluation, atomic checkpoints, bit-identical resume, the CLI,
and a 2-process DDP run (gloo, CPU) under torchrun."""
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from minilin.data import AssociativeRecall, ByteCorpus
from minilin.model import LMConfig, TinyLM
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
    sample_main,
    save_checkpoint,
    train,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def one_thread():
    """Models this small gain nothing from intra-op threads, and on a busy runner spinning OpenMP threads
    made these tests 10-40x slower (measured): run them on one thread, then restore the setting."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    model = TinyLM(LMConfig(attention="linformer", causal=False, block_size=32, dim=32, linformer_k=8))
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


class NotAWeight:
    pass


def test_checkpoint_load_is_weights_only(tmp_path):
    torch.save({"obj": NotAWeight()}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(tmp_path / "evil.pt")


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
    h = train(small(model=dict(attention="linformer", causal=False, linformer_k=8), objective="mlm", steps=4,
                    ef_lr_scale=0.5))
    assert len(h.loss) == 4 and all(math.isfinite(v) for v in h.loss)


def test_synthetic_task_trains_exact_and_linformer():
    task = AssociativeRecall(seq_len=32, n_pairs=4)
    for attention, causal in (("exact", True), ("linformer", False)):
        h = train(small(model=dict(attention=attention, causal=causal, linformer_k=8), steps=4), data=task)
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
    cfg = config_from_args(parse(["--attention", "performer,exact", "--linformer-k", "8,16", "--lr", "1e-3"]))
    assert cfg.model.attention == ["performer", "exact"] and cfg.model.linformer_k == [8, 16] and cfg.lr == 1e-3


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
