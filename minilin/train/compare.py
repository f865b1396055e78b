"""The fair benchmark: several models, each trained under the same recipe sweep and seeds, on one corpus.

Every model gets every (recipe, learning rate) of the sweep with every seed; the table shows each model's best
recipe (lowest mean validation bits/byte over seeds) with its spread over seeds, and calls two models a tie
when their min-max ranges overlap. A model tuned to one recipe thus cannot win by the choice of recipe alone.
Seed s fixes the initial weights and the training batches, so every model sees the same batches for a seed.
"""
import csv
import math
import os
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from minilin.cli import report_progress
from minilin.data import make_data
from minilin.device import resolve_device
from minilin.model import ARCHS, build_model
from minilin.train.config import DEFAULT_RECIPE, RECIPES, TrainConfig
from minilin.train.loop import check_compatible, train

SWEEP_LRS = (1e-3, 3e-3, 1e-2)       # the learning rates --compare sweeps by default
SWEEP_RECIPES = tuple(RECIPES)       # ("cosine", "plain")
CSV_FIELDS = ("model", "arch", "attention", "recipe", "lr", "seed", "steps", "params", "val_bits_per_byte",
              "ms_per_step", "train_s", "status")


def compare_configs(models, config):
    """One TrainConfig per name: an arch ("torch-encoder", ...) or a TinyLM attention ("exact", ...)."""
    return [replace(config, arch=name) if name in ARCHS and name != "tinylm"
            else replace(config, arch="tinylm", model=replace(config.model, attention=name)) for name in models]


def sweep_points(config, recipes=None, lrs=None):
    """[(recipe name, lr)] of a sweep; recipes=None and lrs=None: just the config as it is (recipe None)."""
    if recipes is None and lrs is None:
        return [(None, config.lr)]
    return [(r, lr) for r in (recipes or (DEFAULT_RECIPE,)) for lr in (lrs or (config.lr,))]


def compare(models=("torch-encoder", "exact", "performer"), config=None, *, recipes=None, lrs=None, seeds=None,
            fixed=None, data=None, progress=False, log=None, on_row=None):
    """Train each of `models` under every (recipe, lr) and seed; one result row (a dict) per run.

    A name is an arch ("torch-encoder", "linear-attention-transformer") or a TinyLM attention ("exact",
    "performer", ...). config: the shared TrainConfig (default: L=256, d=128, 2 layers, 4 heads, batch 16,
    600 steps). recipes: names from RECIPES and lrs: learning rates, swept as a grid (default: the config as
    it is); fixed: TrainConfig fields kept over the sweep (e.g. {"warmup": 0}); seeds (default
    (config.seed,)). A run whose loss diverges is a row with status "diverged" and val_bits_per_byte inf.
    on_row(row) is called after each run (e.g. to append it to a CSV file).
    Models alternate innermost, so a machine's load drifts over all of them alike.
    """
    config = TrainConfig() if config is None else config
    data = check_compare(models, config) if data is None else data
    seeds = (config.seed,) if seeds is None else tuple(seeds)
    rows = []
    points = sweep_points(config, recipes, lrs)
    total = len(points) * len(seeds) * len(models)
    report_progress(kept=_kept(on_row, 0, total))
    for recipe, lr in points:
        point = config if recipe is None else replace(config.with_recipe(recipe, lr), **(fixed or {}))
        for seed in seeds:
            for name, cfg in zip(models, compare_configs(models, replace(point, seed=seed))):
                report_progress(context=f"run {len(rows) + 1} of {total} ({name}, recipe {recipe or 'as configured'}, "
                                        f"lr {lr:g}, seed {seed})")
                if log is not None:
                    log(f"--- {name}  recipe {recipe or 'as configured'}  lr {lr:g}  seed {seed}")
                row = {"model": name, "arch": cfg.arch, "attention": cfg.model.attention if cfg.arch == "tinylm"
                       else "", "recipe": recipe or "as-configured", "lr": lr, "seed": seed, "steps": cfg.steps}
                try:
                    h = train(cfg, data=data, progress=progress, log=log)
                    row.update(params=h.params, ms_per_step=1e3 * h.step_time(), train_s=h.time[-1],
                               val_bits_per_byte=h.val_bits[-1], status="ok", history=h)
                except FloatingPointError:
                    row.update(params=0, ms_per_step=math.nan, train_s=math.nan, val_bits_per_byte=math.inf,
                               status="diverged", history=None)
                rows.append(row)
                if on_row is not None:
                    on_row(row)
                report_progress(kept=_kept(on_row, len(rows), total))
    return rows


def _kept(on_row, done, total):
    """What an interrupted comparison leaves on disk (the one line Ctrl-C prints)."""
    path = getattr(on_row, "path", None)
    if path is not None:
        return f"{path} holds the {done} finished run{'s' if done != 1 else ''} of {total}"
    return f"nothing was written (add --csv FILE to keep each finished run); {done} of {total} runs had finished"


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


def recipe_label(recipe, lr):
    return f"{recipe} lr={lr:g}"


def summarize(rows):
    """Per model (in first-seen order): its best recipe by mean val bits/byte over seeds, with the spread.

    Each summary: model, params, recipe, n (seeds), mean, std (0 for one seed), lo, hi (min, max over seeds),
    ms_per_step (median over all the model's runs), verdict: "best", "tie" (its lo-hi range overlaps the
    best model's), "worse", or "one seed: no spread" (no range to compare). A recipe with a diverged seed has mean inf and is never the best unless all are.
    """
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], {}).setdefault((r["recipe"], r["lr"]), []).append(r)
    out = []
    for model, points in by_model.items():
        def mean_of(runs):
            return statistics.fmean(r["val_bits_per_byte"] for r in runs)
        (recipe, lr), runs = min(points.items(), key=lambda kv: mean_of(kv[1]))
        vals = [r["val_bits_per_byte"] for r in runs]
        times = [r["ms_per_step"] for rs in points.values() for r in rs if r["status"] == "ok"]
        finite = all(math.isfinite(v) for v in vals)
        out.append({"model": model, "params": max(r["params"] for rs in points.values() for r in rs),
                    "recipe": recipe_label(recipe, lr), "n": len(vals), "mean": statistics.fmean(vals),
                    "std": statistics.stdev(vals) if len(vals) > 1 and finite else 0.0,
                    "lo": min(vals), "hi": max(vals),
                    "ms_per_step": statistics.median(times) if times else math.nan})
    if out:
        best = min(out, key=lambda s: s["mean"])
        for s in out:  # one seed has no spread: no verdict beyond "lowest"
            s["verdict"] = ("best" if s is best else "one seed: no spread" if min(s["n"], best["n"]) < 2 else
                            "tie" if s["lo"] <= best["hi"] and best["lo"] <= s["hi"] else "worse")
    return out


def format_table(rows):
    """The comparison table: each model's best recipe, mean ± std [min-max] over seeds, and the verdict."""
    lines = [f"{'model':<24}{'params':>10}{'ms/step':>9}  {'best recipe':<18}{'seeds':>5}"
             f"{'val bits/byte (mean ± std [min-max])':>38}  vs best"]
    summary = summarize(rows)
    for s in summary:
        spread = f"{s['mean']:.3f} ± {s['std']:.3f} [{s['lo']:.3f}-{s['hi']:.3f}]"
        lines.append(f"{s['model']:<24}{s['params']:>10,}{s['ms_per_step']:>9.1f}  {s['recipe']:<18}{s['n']:>5}"
                     f"{spread:>38}  {s['verdict']}")
    if any(s["verdict"] == "tie" for s in summary):  # the footnote explains a verdict only where one is shown
        lines.append("tie: the model's min-max range over seeds overlaps the best model's, so the difference is "
                     "not a finding")
    return "\n".join(lines)


def machine_line():
    return (f"{platform.node() or 'unknown host'}, {platform.machine()}, {os.cpu_count()} CPUs, "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
            + (" ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"))


class CsvWriter:
    """One CSV row per (model, recipe, seed), appended as each run ends (a long sweep keeps what it measured).

    The file opens with comment lines (`# key: value`): command, machine, date and any notes; read it back with
    `pandas.read_csv(path, comment="#")` or `csv_rows(path)`.
    """

    def __init__(self, path, *, command, notes=()):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        header = [f"command: {command}", f"machine: {machine_line()}",
                  f"date: {time.strftime('%Y-%m-%d %H:%M:%S %z')}", *notes]
        with self.path.open("w", newline="") as f:
            f.writelines(f"# {line}\n" for line in header)
            csv.writer(f).writerow(CSV_FIELDS)

    def __call__(self, row):
        values = {**row, "lr": f"{row['lr']:g}", "val_bits_per_byte": f"{row['val_bits_per_byte']:.4f}",
                  "ms_per_step": f"{row['ms_per_step']:.1f}", "train_s": f"{row['train_s']:.1f}"}
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow([values[k] for k in CSV_FIELDS])


def csv_rows(path):
    """The rows of a CsvWriter file as dicts with numbers parsed (comment lines skipped)."""
    with Path(path).open(newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    for r in rows:
        r.update(lr=float(r["lr"]), seed=int(r["seed"]), steps=int(r["steps"]), params=int(r["params"]),
                 val_bits_per_byte=float(r["val_bits_per_byte"]), ms_per_step=float(r["ms_per_step"]),
                 train_s=float(r["train_s"]))
    return rows
