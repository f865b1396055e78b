"""The anchor benchmark: several models trained with one budget on one corpus, and their table."""
from dataclasses import replace

import torch

from minilin.data import make_data
from minilin.device import resolve_device
from minilin.model import ARCHS, build_model
from minilin.train.config import TrainConfig
from minilin.train.loop import check_compatible, train


def compare_configs(models, config):
    """One TrainConfig per name: an arch ("torch-encoder", ...) or a TinyLM attention ("exact", ...)."""
    return [replace(config, arch=name) if name in ARCHS and name != "tinylm"
            else replace(config, arch="tinylm", model=replace(config.model, attention=name)) for name in models]


def compare(models=("torch-encoder", "exact", "performer"), config=None, *, data=None, progress=False,
            log=None):
    """Train each of `models` with the same budget and data; a list of result rows (dicts).

    A name is an arch ("torch-encoder", "linear-attention-transformer") or a TinyLM attention ("exact",
    "performer", ...). config: the shared TrainConfig (default: the anchor, L=256, d=128, 2 layers, 4 heads,
    batch 16, AdamW 3e-3, 600 steps). data: the shared corpus (default: check_compare's, which checks
    every configuration before the first one trains).
    """
    config = TrainConfig() if config is None else config
    data = check_compare(models, config) if data is None else data
    rows = []
    for name, cfg in zip(models, compare_configs(models, config)):
        if log is not None:
            log(f"--- {name}")
        h = train(cfg, data=data, progress=progress, log=log)
        rows.append({"model": name, "params": h.params, "steps": h.step[-1], "ms_per_step": 1e3 * h.step_time(),
                     "train_s": h.time[-1], "val_bits_per_byte": h.val_bits[-1], "history": h})
    return rows


def check_compare(models, config):
    """The shared corpus for compare(), after checking every configuration (raises ValueError)."""
    data = None
    for cfg in compare_configs(models, config):
        cfg.validate(check_data=data is None)
        if data is None:
            data = make_data(config.data, block_size=config.model.block_size, objective=config.objective,
                             val_fraction=config.val_fraction, mask_prob=config.mask_prob)
        check_compatible(data, cfg)
        with torch.random.fork_rng(devices=[]):
            build_model(cfg.model, cfg.arch)  # fails now rather than after the models before it have trained
    resolve_device(config.device)
    return data


def format_table(rows):
    lines = [f"{'model':<30}{'params':>10}{'ms/step':>10}{'train s':>10}{'val bits/byte':>15}"]
    for r in rows:
        lines.append(f"{r['model']:<30}{r['params']:>10,}{r['ms_per_step']:>10.1f}{r['train_s']:>10.1f}"
                     f"{r['val_bits_per_byte']:>15.3f}")
    return "\n".join(lines)
