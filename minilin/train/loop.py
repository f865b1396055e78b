"""The training loop: AdamW, warm-up + cosine schedule, clipping, eval in bits per byte, checkpoints,
bit-identical resume, and DDP under torchrun (gloo on CPU, nccl on GPU).

`start_run` does everything before the first step and every check (it raises ValueError for a configuration,
corpus, checkpoint or output path no run can use); `run_steps` trains a `Run`; `train` is the two together.

Determinism: the model is initialised from `seed`, batches come from a torch.Generator seeded from (seed,
rank), evaluation always uses the same validation batches, and a checkpoint stores every piece of state the
next step depends on (weights, AdamW moments, step, both random generators, Performer's redraw counters),
so resuming reproduces the uninterrupted run's loss curve bit for bit on the same machine.
"""
import math
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from minilin.checkpoint import (
    CheckpointError, check_writable, deferred_interrupt, load_weights, read_lm_checkpoint, restore_run, save_run)
from minilin.cli import report_progress
from minilin.data import IGNORE, bits, make_data
from minilin.device import data_parallel, distributed_env, join_process_group, ranks_agree, resolve_device
from minilin.model import build_model, count_parameters
from minilin.train.config import History, TrainConfig, config_from_dict


# ---- schedule, optimizer, evaluation ------------------------------------------------------------------

def lr_at(step, *, lr, steps, warmup, min_lr):
    """Learning rate for 0-based `step`: linear warm-up to lr over `warmup` steps, then cosine to min_lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def is_linformer_projection(name):
    """Parameters named E / F (the Linformer contract) get their own learning rate."""
    return name.split(".")[-1] in ("E", "F")


def make_optimizer(model, config):
    """AdamW with three groups: matrices (decayed), Linformer E/F (lr × ef_lr_scale), norms and biases."""
    groups = {"decay": [], "ef": [], "no_decay": []}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        key = "ef" if is_linformer_projection(name) else ("decay" if p.ndim >= 2 else "no_decay")
        groups[key].append(p)
    param_groups = [
        {"params": groups["decay"], "weight_decay": config.weight_decay, "lr_scale": 1.0},
        {"params": groups["ef"], "weight_decay": config.weight_decay, "lr_scale": config.ef_lr_scale},
        {"params": groups["no_decay"], "weight_decay": 0.0, "lr_scale": 1.0},
    ]
    fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW([g for g in param_groups if g["params"]], lr=config.lr,
                             betas=(config.beta1, config.beta2), fused=fused or None)


@torch.no_grad()
def evaluate(model, data, *, batches=8, batch_size=16, seed=0, device="cpu", split="val"):
    """{"loss", "bits", "acc"} over `batches` fixed batches (the same ones on every call: seeded generator).

    Averages are per predicted position (token-weighted). Under DDP the batches are shared out among ranks
    and the sums all-reduced, so the result does not depend on the number of processes.
    """
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
    for i in range(batches):
        x, y = data.batch(split, batch_size, generator=generator, device=device)
        if i % world != rank:
            continue
        logits, _ = model(x)
        keep = y != IGNORE
        logits, y = logits[keep].float(), y[keep]  # (P, V), (P,)
        sums[0] += torch.nn.functional.cross_entropy(logits, y, reduction="sum").double()
        sums[1] += (logits.argmax(-1) == y).sum()
        sums[2] += len(y)
    if world > 1:
        dist.all_reduce(sums)
    model.train(was_training)
    loss = float(sums[0] / sums[2])
    return {"loss": loss, "bits": bits(loss), "acc": float(sums[1] / sums[2])}


# ---- processes ------------------------------------------------------------------------------------

def rank_seed(seed, rank, stream):
    """Independent seeds per (seed, rank, stream) — ranks must see different batches, not the same ones."""
    return (int(seed) * 1_000_003 + int(rank) * 7919 + int(stream) * 104_729 + 12_345) % (2 ** 63)


# ---- the training loop ------------------------------------------------------------------------------

def check_compatible(data, config):
    if getattr(data, "requires_causal_model", False) and not config.model.causal:
        raise ValueError(
            "next-byte targets need a causal model: a bidirectional one sees the very byte it must predict. "
            "Use the masked-LM objective (objective='mlm', --objective mlm) for causal=False models such as "
            "Linformer.")
    if data.block_size > config.model.block_size:
        raise ValueError(f"the data's sequences ({data.block_size}) are longer than the model's block_size "
                         f"({config.model.block_size})")


@dataclass
class Run:
    """A training run's live state: what a checkpoint saves and a resume restores, and where it runs."""
    config: TrainConfig
    model: torch.nn.Module          # unwrapped (the DDP wrapper, if any, is `net`)
    net: torch.nn.Module            # what the training step calls: the model, or DDP(model)
    optimizer: torch.optim.Optimizer
    data: object                    # a batch source: data.batch(split, batch_size, generator=, device=)
    data_gen: torch.Generator       # draws this rank's training batches
    history: History
    device: torch.device
    rank: int = 0
    world: int = 1
    path: str | None = None         # the checkpoint file; None = write none
    step: int = 0                   # steps done so far (from the checkpoint after a resume)
    owns_group: bool = False        # start_run created the process group, so close() destroys it

    def close(self):
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self.owns_group = False


def start_run(config, *, data=None, model=None, resume=None):
    """Everything before the first step, every check included: a value no run can use, a device this machine
    lacks, a missing or empty corpus, a checkpoint that cannot be read or belongs to another model, an `out`
    that cannot be written all raise ValueError here, before any training. Under torchrun this also joins the
    process group (Run.close() leaves it)."""
    config.validate(check_data=data is None)
    rank, world, local_rank = distributed_env()
    device = resolve_device(config.device, local_rank)
    owns_group = join_process_group(device, world)
    try:
        if data is None:
            try:
                data = make_data(config.data, block_size=config.model.block_size, objective=config.objective,
                                 val_fraction=config.val_fraction, mask_prob=config.mask_prob)
            except UnicodeDecodeError:
                raise ValueError(f"data file {config.data} is not UTF-8 text; convert it or pass another file "
                                 f"(command line: --data)") from None
        check_compatible(data, config)
        if model is None:
            torch.manual_seed(config.seed)  # the same initial weights on every rank
            model = build_model(config.model, config.arch)
        model.to(device)
        data_gen = torch.Generator().manual_seed(rank_seed(config.seed, rank, 0))
        torch.manual_seed(rank_seed(config.seed, rank, 1))  # dropout masks differ between ranks
        run = Run(config, model, model, make_optimizer(model, config), data, data_gen,
                  History(params=count_parameters(model)), device, rank, world, config.out, owns_group=owns_group)
        if resume is not None:
            _restore(run, read_lm_checkpoint(resume), resume)
        if run.path is not None and rank == 0:
            check_writable(run.path)
    except BaseException:
        if owns_group:
            dist.destroy_process_group()
        raise
    if world > 1:
        run.net = data_parallel(model, device)
    return run


def train(config=None, *, data=None, model=None, progress=False, resume=None, stop_at=None, log=None):
    """Train `model` (default: build_model(config.model, config.arch)) on `data` (default: from config.data).

    progress: a tqdm bar with the loss (rank 0; stderr; TQDM_DISABLE=1 turns it off). log: a callable given one
    line of text per evaluation (e.g. print); None = silent. resume: a checkpoint path to continue from.
    stop_at: stop after this step as if interrupted (the schedule still targets config.steps; the checkpoint
    is written). Returns a History; history.model is the trained (unwrapped) model. Under torchrun this is DDP.
    Raises ValueError before the first step for a configuration, corpus, checkpoint or `out` it cannot use.
    """
    run = start_run(TrainConfig() if config is None else config, data=data, model=model, resume=resume)
    try:
        return run_steps(run, progress=progress, stop_at=stop_at, log=log)
    finally:
        run.close()


def run_steps(run, *, progress=False, stop_at=None, log=None):
    """Train `run` from run.step to config.steps (or stop_at); checkpoints go to run.path. Returns the History."""
    config, model, optimizer, history, device = run.config, run.model, run.optimizer, run.history, run.device
    from tqdm import tqdm
    # disable only when asked: an explicit disable=False would override the TQDM_DISABLE environment variable
    bar = tqdm(total=config.steps, initial=run.step, desc="train", dynamic_ncols=True,
               **({} if progress and run.rank == 0 else {"disable": True}))
    elapsed = history.time[-1] if history.time else 0.0
    min_lr = config.lr / 10 if config.min_lr is None else config.min_lr
    warmup = config.steps // 10 if config.warmup is None else config.warmup

    def emit(line):
        if log is None or run.rank != 0:
            return
        if log is print and not bar.disable:
            bar.write(line)  # above the progress bar, not through it
        else:
            log(line)

    last = min(config.steps, stop_at) if stop_at is not None else config.steps
    if run.path is not None and run.step > 0:
        report_progress(kept=f"{run.path} holds step {run.step} (resume with --resume {run.path})")
    for step in range(run.step, last):
        t0 = time.perf_counter()
        lr = lr_at(step, lr=config.lr, steps=config.steps, warmup=warmup, min_lr=min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"]
        x, y = run.data.batch("train", config.batch_size, generator=run.data_gen, device=device)
        model.train()
        _, loss = run.net(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        loss = loss.detach()
        if run.world > 1:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG if device.type == "cuda" else dist.ReduceOp.SUM)
            loss = loss if device.type == "cuda" else loss / run.world  # gloo has no AVG
        loss = float(loss)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed += time.perf_counter() - t0
        run.step = done = step + 1
        history.step.append(done)
        history.loss.append(loss)
        history.lr.append(lr)
        history.time.append(elapsed)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
        if not math.isfinite(loss):
            raise FloatingPointError(f"training loss became {loss} at step {done}; lower the learning rate")
        if done % config.eval_interval == 0 or done == config.steps:
            ev = evaluate(model, run.data, batches=config.eval_batches, batch_size=config.batch_size,
                          seed=rank_seed(config.seed, 0, 2), device=device)
            history.eval_step.append(done)
            history.val_loss.append(ev["loss"])
            history.val_bits.append(ev["bits"])
            history.val_acc.append(ev["acc"])
            emit(f"step {done:>6}  train loss {loss:.4f}  val loss {ev['loss']:.4f}  "
                 f"val bits/byte {ev['bits']:.4f}  val acc {ev['acc']:.3f}  ({elapsed:.1f} s)")
        interval_hit = config.ckpt_interval and done % config.ckpt_interval == 0
        report_progress(where=f"at step {done} of {config.steps}")
        if run.path is not None and (interval_hit or done == last):
            with deferred_interrupt():   # Ctrl-C in a save: after it, and after the note of what it saved
                save_run(run)
                report_progress(kept=f"{run.path} holds step {done} (resume with --resume {run.path})")
    bar.close()
    if run.world > 1 and not ranks_agree(model):
        raise RuntimeError("DDP ranks ended with different weights or buffers; this is a bug")
    history.model = model
    return history


def checkpoint_config(ckpt, path):
    try:
        return config_from_dict(ckpt["config"])
    except (TypeError, KeyError) as err:
        raise CheckpointError(f"{path} was written by another version of minilin (its config does not fit: "
                              f"{err}); train again with this version") from None


def _restore(run, ckpt, path):
    """Check that the checkpoint continues this run (same model, processes, steps left), then restore it."""
    saved, config = checkpoint_config(ckpt, path), run.config
    if saved.model != config.model or saved.arch != config.arch:
        ours, theirs = {"arch": config.arch, **asdict(config.model)}, {"arch": saved.arch, **asdict(saved.model)}
        diff = ", ".join(f"{k} {theirs[k]!r} there, {ours[k]!r} here" for k in ours if ours[k] != theirs[k])
        raise ValueError(f"the checkpoint {path} was trained with a different model ({diff}); resume with the "
                         f"checkpoint's config (config_from_dict(ckpt['config']); on the command line, drop the "
                         f"model options)")
    if ckpt.get("world_size", 1) != run.world:
        raise ValueError(f"the checkpoint was written by {ckpt['world_size']} processes, this run has {run.world}: "
                         f"resume with the same --nproc_per_node to continue the same random streams")
    if int(ckpt["step"]) >= config.steps:
        raise ValueError(f"the checkpoint {path} is already at step {ckpt['step']} of steps={config.steps}: "
                         f"nothing left to train; ask for more (command line: --steps N with N > {ckpt['step']})")
    restore_run(run, ckpt, path)


def load_model(path, map_location="cpu"):
    """(model in eval mode, TrainConfig) from a checkpoint written by `train`; CheckpointError if unreadable."""
    ckpt = read_lm_checkpoint(path, map_location=map_location)
    config = checkpoint_config(ckpt, path)
    model = build_model(config.model, config.arch)
    load_weights(model, ckpt, path)
    return model.to(map_location).eval(), config
