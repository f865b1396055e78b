"""The configuration and the record of a training run: TrainConfig (with its checks) and History."""
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch

from minilin.data import TASKS
from minilin.model import ARCHS, ATTENTIONS, INITS, POSITIONS, LMConfig

DEFAULT_OUT = "checkpoints/lm.pt"  # where `python -m minilin train` writes, relative to the current folder


@dataclass
class TrainConfig:
    """Everything a run depends on. Defaults: the reference run (600 steps, batch 16, AdamW 1e-2, warm-up + cosine)."""
    model: LMConfig = field(default_factory=LMConfig)
    arch: str = "tinylm"            # or "torch-encoder" (the reference baseline), "linear-attention-transformer"
    data: str = "pydoc"             # "pydoc", a UTF-8 file path, or a task: "recall", "copy"
    objective: str = "clm"          # text corpora: "clm" (next byte) or "mlm" (masked bytes)
    steps: int = 600
    batch_size: int = 16            # per process under DDP
    lr: float = 1e-2                # TinyLM learns faster at 1e-2 than at 3e-3 (measured: see TinyLM._init_weights)
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
    ckpt_interval: int = 0          # 0 = only at the end

    def with_recipe(self, name, lr=None):
        """This config trained under the named recipe (RECIPES) at learning rate `lr` (default self.lr)."""
        if name not in RECIPES:
            raise ValueError(f"unknown recipe {name!r}: choose from {', '.join(RECIPES)} (command line: --recipe)")
        lr = self.lr if lr is None else lr
        values = {k: (lr if v == "lr" else v) for k, v in RECIPES[name].items()}
        return replace(self, lr=lr, **values)

    def validate(self, check_data=True):
        """Raise ValueError for the first value no run can use, naming the field, the rule and the command-line
        option. check_data: also check that `data` is 'pydoc', a task or a non-empty file."""
        m = self.model
        for name, (ok, rule) in RULES.items():
            value = getattr(m if name.startswith("model.") else self, name.split(".")[-1])
            if not (value is None and name in OPTIONAL or ok(value, self)):
                raise ValueError(f"{name} must be {rule}, got {value!r} (command line: {_flag(name)})")
        if m.dim_head is None and m.dim % m.heads:
            raise ValueError(f"model.dim={m.dim} is not divisible by model.heads={m.heads}: choose heads that divide "
                             f"dim (command line: --heads, --dim)")
        for name in ("attention", "proj_len"):
            value = getattr(m, name)
            if isinstance(value, (list, tuple)) and len(value) != m.depth:
                raise ValueError(f"model.{name} lists {len(value)} values for depth={m.depth}: give one value or one "
                                 f"per layer (command line: {_flag(name)}, --depth)")
        if check_data and self.data not in TASKS and self.data != "pydoc":
            path = Path(self.data)
            if not path.is_file():
                raise ValueError(f"data {self.data!r} is neither 'pydoc', a task ({', '.join(TASKS)}) nor a file"
                                 f"{' (it is a folder)' if path.is_dir() else ''}; check the path (command line: --data)")
            if path.stat().st_size == 0:
                raise ValueError(f"data file {path} is empty: pass a UTF-8 text file longer than a few blocks "
                                 f"(command line: --data)")


# Training recipes. The learning rate is the config's own (--lr); a recipe sets everything else the optimizer
# and schedule depend on. "cosine" is TrainConfig's default (minilin's home recipe); "plain" is the loop most
# PyTorch code starts with: torch.optim.AdamW's defaults at a constant learning rate (weight decay 0.01,
# applied to matrices only, as in every minilin run). compare() sweeps both over several learning rates.
RECIPES = {
    "cosine": {"warmup": None, "min_lr": None, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.99, "grad_clip": 1.0},
    "plain": {"warmup": 0, "min_lr": "lr", "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999, "grad_clip": 0.0},
}
DEFAULT_RECIPE = "cosine"


def _each(value):
    return value if isinstance(value, (list, tuple)) else [value]


def _flag(name):
    return "--" + name.split(".")[-1].replace("_", "-")


_AT_LEAST_1 = (lambda v, c: v >= 1, "at least 1")
_AT_LEAST_0 = (lambda v, c: v >= 0, "0 or more")
_UNIT = (lambda v, c: 0 <= v < 1, "in [0, 1)")
OPTIONAL = {"warmup", "min_lr", "model.nb_features"}  # None = derived from other values
RULES = {  # field: (test(value, config), rule); TrainConfig.validate checks them in this order
    "steps": _AT_LEAST_1, "batch_size": _AT_LEAST_1, "eval_interval": _AT_LEAST_1, "eval_batches": _AT_LEAST_1,
    "ckpt_interval": (_AT_LEAST_0[0], "0 (only at the end) or more"), "warmup": _AT_LEAST_0,
    "lr": (lambda v, c: 0 < v < math.inf, "a positive number"), "min_lr": (lambda v, c: 0 <= v <= c.lr, "in [0, lr]"),
    "weight_decay": _AT_LEAST_0, "beta1": _UNIT, "beta2": _UNIT, "grad_clip": (_AT_LEAST_0[0], "0 (off) or more"),
    "ef_lr_scale": _AT_LEAST_0, "val_fraction": (lambda v, c: 0 < v < 1, "in (0, 1)"),
    "mask_prob": (lambda v, c: 0 < v <= 1, "in (0, 1]"),
    "objective": (lambda v, c: v in ("clm", "mlm"), "'clm' (next byte) or 'mlm' (masked bytes)"),
    "arch": (lambda v, c: v in ARCHS, f"one of {', '.join(sorted(ARCHS))}"),
    "model.block_size": _AT_LEAST_1, "model.dim": _AT_LEAST_1, "model.depth": _AT_LEAST_1,
    "model.heads": _AT_LEAST_1, "model.ff_mult": _AT_LEAST_1, "model.dropout": _UNIT,
    "model.positions": (lambda v, c: v in POSITIONS, f"one of {', '.join(POSITIONS)}"),
    "model.init": (lambda v, c: v in INITS, f"one of {', '.join(INITS)}"),
    "model.attention": (lambda v, c: all(a in ATTENTIONS for a in _each(v)),
                        f"one of {', '.join(ATTENTIONS)}, or a list with one per layer"),
    "model.proj_len": (lambda v, c: all(k >= 1 for k in _each(v)), "at least 1 (Linformer's projected length)"),
    "model.nb_features": _AT_LEAST_1,
}


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
    """TrainConfig from config_to_dict's output (a checkpoint's "config")."""
    d, model = dict(d), dict(d["model"])
    if "linformer_k" in model:  # checkpoints written before the rename to proj_len
        model["proj_len"] = model.pop("linformer_k")
    return TrainConfig(**{**d, "model": LMConfig(**model)})
