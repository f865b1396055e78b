"""Train and sample the tiny byte-level LM: AdamW, warm-up + cosine schedule, clipping, eval in bits per byte,
atomic checkpoints, bit-identical resume, and DDP under torchrun (gloo on CPU, nccl on GPU).

    python -m minilin train --attention performer --steps 600            # one model, pydoc corpus
    python -m minilin train --objective mlm --attention linformer --linformer-k 32
    python -m minilin train --compare torch-encoder,exact,performer      # the anchor benchmark
    torchrun --nproc_per_node=2 -m minilin train --steps 200             # DDP, one process per device
    python -m minilin sample --ckpt checkpoints/lm.pt --prompt "def "

From Python (notebooks): `history = train(TrainConfig(...), progress=False)`; `history.model` is the trained
model, `history.loss` the per-step training loss, `history.val_bits` the validation bits per byte.

Determinism: the model is initialised from `seed`, batches come from a torch.Generator seeded from (seed,
rank), evaluation always uses the same validation batches, and a checkpoint stores every piece of state the
next step depends on (weights, AdamW moments, step, both random generators, Performer's redraw counters),
so resuming reproduces the uninterrupted run's loss curve bit for bit on the same machine.
"""
import argparse
import inspect
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch
import torch.distributed as dist

from minilin.data import IGNORE, TASKS, bits, decode, encode, make_data
from minilin.model import ARCHS, LMConfig, TinyLM, build_model, count_parameters

CHECKPOINT_FORMAT = "minilin-lm-1"


@dataclass
class TrainConfig:
    """Everything a run depends on. Defaults: the anchor benchmark (600 steps, batch 16, AdamW 3e-3)."""
    model: LMConfig = field(default_factory=LMConfig)
    arch: str = "tinylm"            # or "torch-encoder" (the anchor), "linear-attention-transformer"
    data: str = "pydoc"             # "pydoc", a UTF-8 file path, or a task: "recall", "copy"
    objective: str = "clm"          # text corpora: "clm" (next byte) or "mlm" (masked bytes)
    steps: int = 600
    batch_size: int = 16            # per process under DDP
    lr: float = 3e-3
    min_lr: float | None = None     # the cosine ends here; None = lr / 10
    warmup: int | None = None       # linear warm-up steps; None = steps / 10
    weight_decay: float = 0.1       # on matrices only (not norms, biases)
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0          # max global gradient norm; 0 = off
    ef_lr_scale: float = 1.0        # learning-rate multiplier for Linformer's E/F
    eval_interval: int = 100
    eval_batches: int = 8
    val_fraction: float = 0.1
    mask_prob: float = 0.15
    seed: int = 0
    device: str = "auto"            # "auto" = cuda if available, else cpu
    out: str | None = None          # checkpoint path (written at the end and every ckpt_interval steps)
    ckpt_interval: int = 0


@dataclass
class History:
    """Per-step and per-eval records of a run; `model` is the trained model (not saved in checkpoints)."""
    step: list = field(default_factory=list)
    loss: list = field(default_factory=list)       # training loss (nats per predicted byte), mean over ranks
    lr: list = field(default_factory=list)
    time: list = field(default_factory=list)       # training seconds so far (evaluation excluded)
    eval_step: list = field(default_factory=list)
    val_loss: list = field(default_factory=list)
    val_bits: list = field(default_factory=list)   # bits per predicted byte (per masked byte for MLM)
    val_acc: list = field(default_factory=list)    # argmax accuracy at predicted positions
    params: int = 0
    model: object = field(default=None, repr=False, compare=False)

    def to_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "model"}

    @classmethod
    def from_dict(cls, d):
        return cls(**d)

    def step_time(self):
        """Median seconds per training step."""
        dt = torch.tensor([b - a for a, b in zip([0.0] + self.time[:-1], self.time)])
        return float(dt.median()) if len(dt) else float("nan")


def config_to_dict(config):
    return asdict(config)


def config_from_dict(d):
    d = dict(d)
    return TrainConfig(**{**d, "model": LMConfig(**d["model"])})


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


# ---- checkpoints ----------------------------------------------------------------------------------------

def save_checkpoint(obj, path):
    """torch.save to a temporary file in the same folder, fsync, then os.replace: a crash never leaves a
    truncated checkpoint behind — readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows (same filesystem)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_checkpoint(path, map_location="cpu"):
    """torch.load with weights_only=True: tensors and plain containers only, no arbitrary code on load."""
    return torch.load(path, map_location=map_location, weights_only=True)


# ---- devices and processes --------------------------------------------------------------------------

def resolve_device(device="auto", local_rank=0):
    """'auto' -> cuda:<local_rank> if CUDA is available, else cpu; anything else is passed to torch.device."""
    if device == "auto":
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return device


def distributed_env():
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) when not launched by it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def rank_seed(seed, rank, stream):
    """Independent seeds per (seed, rank, stream) — ranks must see different batches, not the same ones."""
    return (int(seed) * 1_000_003 + int(rank) * 7919 + int(stream) * 104_729 + 12_345) % (2 ** 63)


def ranks_agree(model):
    """True when every parameter and buffer is bitwise equal to rank 0's (call on all ranks under DDP)."""
    flat = torch.cat([t.detach().reshape(-1).double() for t in list(model.parameters()) + list(model.buffers())])
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    same = torch.tensor([float(torch.equal(flat, reference))], device=flat.device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    return bool(same.item() == 1.0)


# ---- the training loop ------------------------------------------------------------------------------

def check_compatible(data, config):
    if getattr(data, "requires_causal_model", False) and not config.model.causal:
        raise ValueError(
            "next-byte targets need a causal model: a bidirectional one sees the very byte it must predict. "
            "Use the masked-LM objective (objective='mlm') for causal=False models such as Linformer.")
    if data.block_size > config.model.block_size:
        raise ValueError(f"the data's sequences ({data.block_size}) are longer than the model's block_size "
                         f"({config.model.block_size})")


def train(config=None, *, data=None, model=None, progress=False, resume=None, stop_at=None, log=None):
    """Train `model` (default: build_model(config.model, config.arch)) on `data` (default: from config.data).

    progress: a tqdm bar with the loss (rank 0; stderr). log: a callable given one line of text per
    evaluation (e.g. print); None = silent. resume: a checkpoint path to continue from. stop_at: stop after
    this step as if interrupted (the schedule still targets config.steps; the checkpoint is written).
    Returns a History; history.model is the trained (unwrapped) model. Under torchrun this is DDP.
    """
    config = TrainConfig() if config is None else config
    rank, world, local_rank = distributed_env()
    device = resolve_device(config.device, local_rank)
    started_group = False
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        started_group = True
    try:
        return _train(config, data, model, progress, resume, stop_at, log, rank, world, device)
    finally:
        if started_group:
            dist.destroy_process_group()


def _train(config, data, model, progress, resume, stop_at, log, rank, world, device):
    if data is None:
        data = make_data(config.data, block_size=config.model.block_size, objective=config.objective,
                         val_fraction=config.val_fraction, mask_prob=config.mask_prob)
    check_compatible(data, config)
    if model is None:
        torch.manual_seed(config.seed)  # the same initial weights on every rank
        model = build_model(config.model, config.arch)
    model.to(device)
    optimizer = make_optimizer(model, config)
    data_gen = torch.Generator().manual_seed(rank_seed(config.seed, rank, 0))
    torch.manual_seed(rank_seed(config.seed, rank, 1))  # dropout masks differ between ranks
    history = History(params=count_parameters(model))
    start = 0
    if resume is not None:
        start = _restore(load_checkpoint(resume), config, model, optimizer, data_gen, history, rank, world)
    wrapped = model
    if world > 1:
        # broadcast_buffers=False: Performer's projection is redrawn from (seed, count) on every rank alike,
        # so ranks agree without communication — and the DDP test checks that they really do.
        DDP = torch.nn.parallel.DistributedDataParallel
        no_sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DDP).parameters
                   else {"broadcast_buffers": False})  # the name changed in torch 2.13
        wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **no_sync)
    from tqdm import tqdm
    bar = tqdm(total=config.steps, initial=start, disable=not progress or rank != 0, desc="train",
               dynamic_ncols=True)
    elapsed = history.time[-1] if history.time else 0.0
    min_lr = config.lr / 10 if config.min_lr is None else config.min_lr
    warmup = config.steps // 10 if config.warmup is None else config.warmup

    def emit(line):
        if log is None or rank != 0:
            return
        if log is print and not bar.disable:
            bar.write(line)  # above the progress bar, not through it
        else:
            log(line)

    last = min(config.steps, stop_at) if stop_at is not None else config.steps
    for step in range(start, last):
        t0 = time.perf_counter()
        lr = lr_at(step, lr=config.lr, steps=config.steps, warmup=warmup, min_lr=min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"]
        x, y = data.batch("train", config.batch_size, generator=data_gen, device=device)
        model.train()
        _, loss = wrapped(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        loss = loss.detach()
        if world > 1:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG if device.type == "cuda" else dist.ReduceOp.SUM)
            loss = loss if device.type == "cuda" else loss / world  # gloo has no AVG
        loss = float(loss)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed += time.perf_counter() - t0
        done = step + 1
        history.step.append(done)
        history.loss.append(loss)
        history.lr.append(lr)
        history.time.append(elapsed)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
        if not math.isfinite(loss):
            raise FloatingPointError(f"training loss became {loss} at step {done}; lower the learning rate")
        if done % config.eval_interval == 0 or done == config.steps:
            ev = evaluate(model, data, batches=config.eval_batches, batch_size=config.batch_size,
                          seed=rank_seed(config.seed, 0, 2), device=device)
            history.eval_step.append(done)
            history.val_loss.append(ev["loss"])
            history.val_bits.append(ev["bits"])
            history.val_acc.append(ev["acc"])
            emit(f"step {done:>6}  train loss {loss:.4f}  val loss {ev['loss']:.4f}  "
                 f"val bits/byte {ev['bits']:.4f}  val acc {ev['acc']:.3f}  ({elapsed:.1f} s)")
        interval_hit = config.ckpt_interval and done % config.ckpt_interval == 0
        if config.out is not None and (interval_hit or done == last):
            _save(config.out, config, done, model, optimizer, data_gen, history, rank, world)
    bar.close()
    if world > 1 and not ranks_agree(model):
        raise RuntimeError("DDP ranks ended with different weights or buffers; this is a bug")
    history.model = model
    return history


def _rng_state(data_gen, world):
    state = {"data": data_gen.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if world > 1:  # every rank has its own generators: gather them so that each gets its own back
        gathered = [None] * world
        dist.all_gather_object(gathered, state)
        return gathered
    return [state]


def _save(path, config, step, model, optimizer, data_gen, history, rank, world):
    rng = _rng_state(data_gen, world)  # collective: every rank takes part
    if rank == 0:
        save_checkpoint({"format": CHECKPOINT_FORMAT, "config": config_to_dict(config), "step": step,
                         "world_size": world, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "history": history.to_dict(), "rng": rng}, path)
    if world > 1:
        dist.barrier()


def _restore(ckpt, config, model, optimizer, data_gen, history, rank, world):
    if ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"not a minilin LM checkpoint (format {ckpt.get('format')!r})")
    saved = config_from_dict(ckpt["config"])
    if saved.model != config.model or saved.arch != config.arch:
        raise ValueError(f"the checkpoint was trained with a different model: {saved.arch} {saved.model} "
                         f"vs {config.arch} {config.model}; resume with the checkpoint's config "
                         f"(config_from_dict(ckpt['config']))")
    if ckpt["world_size"] != world:
        raise ValueError(f"the checkpoint was written by {ckpt['world_size']} processes, this run has {world}: "
                         f"resume with the same --nproc_per_node to continue the same random streams")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    rng = ckpt["rng"][rank]
    data_gen.set_state(rng["data"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    for key, value in ckpt["history"].items():
        setattr(history, key, value)
    return int(ckpt["step"])


def load_model(path, map_location="cpu"):
    """(model in eval mode, TrainConfig) from a checkpoint written by `train`."""
    ckpt = load_checkpoint(path, map_location=map_location)
    config = config_from_dict(ckpt["config"])
    model = build_model(config.model, config.arch)
    model.load_state_dict(ckpt["model"])
    return model.to(map_location).eval(), config


# ---- the anchor benchmark ------------------------------------------------------------------------------

def compare(models=("torch-encoder", "exact", "performer"), config=None, *, progress=False, log=None):
    """Train each of `models` with the same budget and data; a list of result rows (dicts).

    A name is an arch ("torch-encoder", "linear-attention-transformer") or a TinyLM attention ("exact",
    "performer", ...). config: the shared TrainConfig (default: the anchor, L=256, d=128, 2 layers, 4 heads,
    batch 16, AdamW 3e-3, 600 steps).
    """
    config = TrainConfig() if config is None else config
    data = make_data(config.data, block_size=config.model.block_size, objective=config.objective,
                     val_fraction=config.val_fraction, mask_prob=config.mask_prob)
    rows = []
    for name in models:
        if name in ARCHS and name != "tinylm":
            cfg = replace(config, arch=name)
        else:
            cfg = replace(config, arch="tinylm", model=replace(config.model, attention=name))
        if log is not None:
            log(f"--- {name}")
        h = train(cfg, data=data, progress=progress, log=log)
        rows.append({"model": name, "params": h.params, "steps": h.step[-1], "ms_per_step": 1e3 * h.step_time(),
                     "train_s": h.time[-1], "val_bits_per_byte": h.val_bits[-1], "history": h})
    return rows


def format_table(rows):
    lines = [f"{'model':<30}{'params':>10}{'ms/step':>10}{'train s':>10}{'val bits/byte':>15}"]
    for r in rows:
        lines.append(f"{r['model']:<30}{r['params']:>10,}{r['ms_per_step']:>10.1f}{r['train_s']:>10.1f}"
                     f"{r['val_bits_per_byte']:>15.3f}")
    return "\n".join(lines)


# ---- command line ------------------------------------------------------------------------------------

def _ints(text):
    values = [int(t) for t in text.split(",")]
    return values[0] if len(values) == 1 else values


def _names(text):
    values = text.split(",")
    return values[0] if len(values) == 1 else values


def build_parser():
    d, m = TrainConfig(), LMConfig()
    p = argparse.ArgumentParser(prog="python -m minilin train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument_group("model")
    a.add_argument("--arch", choices=sorted(ARCHS), help=f"architecture (default {d.arch})")
    a.add_argument("--attention", type=_names,
                   help="exact, sdpa, linformer, performer or efficient; comma list = one per layer (default exact)")
    a.add_argument("--positions", choices=("learned", "rope", "none"), help=f"default {m.positions}")
    a.add_argument("--block-size", type=int, help=f"sequence length (default {m.block_size})")
    a.add_argument("--dim", type=int, help=f"default {m.dim}")
    a.add_argument("--depth", type=int, help=f"default {m.depth}")
    a.add_argument("--heads", type=int, help=f"default {m.heads}")
    a.add_argument("--ff-mult", type=int, help=f"default {m.ff_mult}")
    a.add_argument("--dropout", type=float, help=f"default {m.dropout}")
    a.add_argument("--causal", action=argparse.BooleanOptionalAction,
                   help="causal model (default: yes, except --objective mlm or a Linformer layer on a task)")
    a.add_argument("--linformer-k", type=_ints, help=f"Linformer's k, comma list = per layer (default {m.linformer_k})")
    a.add_argument("--linformer-sharing", choices=("none", "headwise", "kv", "layerwise"),
                   help=f"default {m.linformer_sharing}")
    a.add_argument("--nb-features", type=int, help="Performer's m (default dim_head·ln dim_head)")
    a.add_argument("--redraw-interval", type=int, help=f"Performer redraw period (default {m.redraw_interval})")
    t = p.add_argument_group("training")
    t.add_argument("--data", help=f"pydoc, a UTF-8 file, or a task: {', '.join(TASKS)} (default {d.data})")
    t.add_argument("--objective", choices=("clm", "mlm"), help=f"text objective (default {d.objective})")
    defaults = {"warmup": "steps / 10", "min_lr": "lr / 10"}
    for name in ("steps", "batch_size", "warmup", "eval_interval", "eval_batches", "seed", "ckpt_interval"):
        t.add_argument("--" + name.replace("_", "-"), type=int, help=f"default {defaults.get(name, getattr(d, name))}")
    for name in ("lr", "min_lr", "weight_decay", "grad_clip", "ef_lr_scale", "mask_prob"):
        t.add_argument("--" + name.replace("_", "-"), type=float,
                       help=f"default {defaults.get(name, getattr(d, name))}")
    t.add_argument("--device", help="auto (default), cpu, cuda, cuda:1, ...")
    t.add_argument("--out", help="checkpoint path (written atomically at the end and every --ckpt-interval)")
    t.add_argument("--resume", help="continue from this checkpoint (its config; --steps may extend it)")
    t.add_argument("--history", help="write the History (per-step losses, evals) as JSON here")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--compare", type=_names,
                   help="train several models with one budget and print a table, e.g. torch-encoder,exact,performer")
    return p


MODEL_ARGS = ("attention", "positions", "block_size", "dim", "depth", "heads", "ff_mult", "dropout", "causal",
              "linformer_k", "linformer_sharing", "nb_features", "redraw_interval")
TRAIN_ARGS = ("arch", "data", "objective", "steps", "batch_size", "warmup", "eval_interval", "eval_batches", "seed",
              "ckpt_interval", "lr", "min_lr", "weight_decay", "grad_clip", "ef_lr_scale", "mask_prob", "device", "out")


def config_from_args(args, base=None):
    """TrainConfig from parsed CLI args: the options given override `base` (default TrainConfig())."""
    base = TrainConfig() if base is None else base
    model = replace(base.model, **{k: getattr(args, k) for k in MODEL_ARGS if getattr(args, k) is not None})
    if args.causal is None and args.resume is None:  # derive: a text MLM, or a Linformer layer on a task
        objective, task = args.objective or base.objective, (args.data or base.data) in TASKS
        if (objective == "mlm" and not task) or (task and "linformer" in model.layer_attention()):
            model = replace(model, causal=False)
    return replace(base, model=model, **{k: getattr(args, k) for k in TRAIN_ARGS if getattr(args, k) is not None})


def main(argv=None):
    """`python -m minilin train`: returns 0 on success."""
    args = build_parser().parse_args(argv)
    base = config_from_dict(load_checkpoint(args.resume)["config"]) if args.resume else None
    config = config_from_args(args, base)
    rank = distributed_env()[0]
    say = print if rank == 0 else None
    if args.compare:
        names = [args.compare] if isinstance(args.compare, str) else args.compare
        rows = compare(names, config, progress=not args.no_progress, log=say)
        if say:
            say(format_table(rows))
            say(f"device {resolve_device(config.device)}, torch {torch.__version__}, "
                f"{torch.get_num_threads()} threads")
        return 0
    if say:
        say(f"{config.arch} {config.model}")
    history = train(config, progress=not args.no_progress, resume=args.resume, log=say)
    if say:
        say(f"{history.params:,} parameters, {1e3 * history.step_time():.1f} ms/step, final val bits/byte "
            f"{history.val_bits[-1]:.4f}" + (f", checkpoint {config.out}" if config.out else ""))
    if args.history and rank == 0:
        Path(args.history).write_text(json.dumps(history.to_dict()))
    return 0


def sample_main(argv=None):
    """`python -m minilin sample`: print text generated from a checkpoint."""
    p = argparse.ArgumentParser(prog="python -m minilin sample", description="Generate text from a checkpoint.")
    p.add_argument("--ckpt", required=True, help="checkpoint written by `python -m minilin train --out ...`")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--tokens", type=int, default=200, help="bytes to generate (default 200)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--device", default="auto")
    p.add_argument("--recurrent", choices=("auto", "yes", "no"), default="auto",
                   help="decode token by token with the layers' states (Performer: O(1) memory) or re-run the "
                        "prefix for every byte (default auto: recurrent when every layer supports it)")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    model, config = load_model(args.ckpt, map_location=device)
    if not isinstance(model, TinyLM):
        p.error(f"sampling supports TinyLM checkpoints, this one is {config.arch}")
    prompt = encode(args.prompt)
    if len(prompt) == 0:
        p.error("the prompt must not be empty")
    idx = prompt[None].repeat(args.num_samples, 1).to(device)
    recurrent = {"auto": None, "yes": True, "no": False}[args.recurrent]
    out = model.generate(idx, args.tokens, temperature=args.temperature, top_k=args.top_k,
                         generator=torch.Generator().manual_seed(args.seed), recurrent=recurrent)
    for i, row in enumerate(out):
        if i:
            print("-" * 40)
        print(decode(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
