"""`python -m minilin train`: train one model (or --compare several) from the command line.

    python -m minilin train --attention performer --steps 600            # writes checkpoints/lm.pt
    python -m minilin sample --ckpt checkpoints/lm.pt --prompt "def "    # text from it
    python -m minilin train --resume checkpoints/lm.pt --steps 900       # continue, in the same file
    python -m minilin train --objective mlm --attention linformer --proj-len 32
    python -m minilin train --recipe plain                               # AdamW's defaults, constant lr
    python -m minilin train --compare torch-encoder,exact,performer --csv results/lm.csv   # the fair benchmark
    python -m minilin train --compare torch-encoder,sdpa --quick         # one recipe, 3 seeds
    python -m minilin train --step-time sdpa,torch-encoder               # step time side by side
    torchrun --nproc_per_node=2 -m minilin train --steps 200             # DDP, one process per device

A checkpoint goes to checkpoints/lm.pt in the current folder unless --out says otherwise (--no-save: none);
a resumed run continues in the file it resumed from. Every value, path and checkpoint is checked before the
first step; a bad one is one line on stderr naming the fix, exit code 2.

Recipes (--recipe): "cosine" (the default: warm-up over steps/10, cosine to lr/10, weight decay 0.1, betas
(0.9, 0.99), gradient clipping at 1) and "plain" (torch.optim.AdamW's defaults at a constant lr: weight decay
0.01, betas (0.9, 0.999), no warm-up, no clipping); options given explicitly (--warmup, ...) override them.
--compare trains every model under every recipe of --recipe (default: both) at every rate of --lrs (default
1e-3,3e-3,1e-2) with --seeds seeds (default 3), and prints each model's best recipe with its spread over seeds;
--quick keeps one recipe (the first of --recipe, default cosine) at --lr (default 1e-2), still --seeds seeds.
--csv PATH writes one row per (model, recipe, lr, seed) as each run ends, under a command/machine/date header.
--step-time times training steps of several models in interleaved rounds (--rounds, default 7) and prints each
one's median ms/step and its ratio to the first model, with interquartile ranges (no training, no checkpoint).
"""
import argparse
import json
from dataclasses import replace
from pathlib import Path

import torch

from minilin.checkpoint import check_writable, read_lm_checkpoint
from minilin.cli import Parser, UsageError, nonnegative_int, positive_float, positive_int, reset_progress
from minilin.data import TASKS
from minilin.device import DEVICE_HELP, distributed_env, resolve_device
from minilin.model import ARCHS, ATTENTIONS, INITS, POSITIONS, LMConfig
from minilin.train.compare import SWEEP_LRS, CsvWriter, check_compare, compare, format_table
from minilin.train.config import DEFAULT_OUT, DEFAULT_RECIPE, RECIPES, TrainConfig
from minilin.train.loop import checkpoint_config, run_steps, start_run


def _name_list(valid, what):
    def parse(text):
        names = text.split(",")
        for name in names:
            if name not in valid:
                raise argparse.ArgumentTypeError(f"unknown {what} {name!r}: choose from {', '.join(valid)}")
        return names[0] if len(names) == 1 else names
    return parse


def _positive_ints(text):
    values = [positive_int(t) for t in text.split(",")]
    return values[0] if len(values) == 1 else values


def _positive_floats(text):
    return [positive_float(t) for t in text.split(",")]


def build_parser():
    d, m = TrainConfig(), LMConfig()
    p = Parser(prog="python -m minilin train", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument_group("model")
    a.add_argument("--arch", choices=sorted(ARCHS), help=f"architecture (default {d.arch})")
    a.add_argument("--attention", type=_name_list(ATTENTIONS, "attention"),
                   help=f"{', '.join(ATTENTIONS)}; a comma list gives one per layer (default {m.attention})")
    a.add_argument("--positions", choices=POSITIONS, help=f"default {m.positions}")
    a.add_argument("--init", choices=INITS, help=f"TinyLM's initialisation (default {m.init})")
    a.add_argument("--block-size", type=positive_int, help=f"sequence length (default {m.block_size})")
    for name in ("dim", "depth", "heads", "ff_mult"):
        a.add_argument("--" + name.replace("_", "-"), type=positive_int, help=f"default {getattr(m, name)}")
    a.add_argument("--dropout", type=float, help=f"in [0, 1) (default {m.dropout})")
    a.add_argument("--causal", action=argparse.BooleanOptionalAction,
                   help="causal model (default: yes, except --objective mlm or a Linformer layer on a task)")
    a.add_argument("--proj-len", type=_positive_ints,
                   help=f"Linformer's projected length k; a comma list gives one per layer (default {m.proj_len})")
    a.add_argument("--linformer-sharing", choices=("none", "headwise", "kv", "layerwise"),
                   help=f"default {m.linformer_sharing}")
    a.add_argument("--nb-features", type=positive_int, help="Performer's m (default dim_head·ln dim_head)")
    a.add_argument("--redraw-interval", type=positive_int,
                   help=f"Performer redraw period (default {m.redraw_interval})")
    t = p.add_argument_group("training")
    t.add_argument("--data", help=f"pydoc, a UTF-8 file, or a task: {', '.join(TASKS)} (default {d.data})")
    t.add_argument("--objective", choices=("clm", "mlm"), help=f"text objective (default {d.objective})")
    defaults = {"warmup": "steps / 10", "min_lr": "lr / 10", "ckpt_interval": "0: only at the end"}
    kinds = {"steps": positive_int, "batch_size": positive_int, "warmup": nonnegative_int,
             "eval_interval": positive_int, "eval_batches": positive_int, "seed": int, "ckpt_interval": nonnegative_int,
             "lr": positive_float, "min_lr": float, "weight_decay": float, "grad_clip": float, "ef_lr_scale": float,
             "mask_prob": positive_float}
    for name, kind in kinds.items():
        t.add_argument("--" + name.replace("_", "-"), type=kind, help=f"default {defaults.get(name, getattr(d, name))}")
    t.add_argument("--recipe", type=_name_list(tuple(RECIPES), "recipe"),
                   help=f"training recipe: {', '.join(RECIPES)} (default {DEFAULT_RECIPE}; with --compare a comma "
                        f"list to sweep, default all)")
    t.add_argument("--device", help=DEVICE_HELP)
    save = t.add_mutually_exclusive_group()
    save.add_argument("--out", help=f"checkpoint path, written atomically at the end and every --ckpt-interval steps "
                                    f"(default {DEFAULT_OUT} in the current folder; with --resume: the file "
                                    f"resumed from)")
    save.add_argument("--no-save", action="store_true", help="write no checkpoint")
    t.add_argument("--resume", help="continue from this checkpoint (its config; --steps may extend it)")
    t.add_argument("--history", help="write the History (per-step losses, evals) as JSON here")
    t.add_argument("--no-progress", action="store_true", help="no progress bar (or set TQDM_DISABLE=1)")
    t.add_argument("--verbose", action="store_true", help="print the whole configuration before training")
    t.add_argument("--compare", type=_name_list(tuple(a for a in ARCHS if a != "tinylm") + tuple(ATTENTIONS), "model"),
                   help="train several models with one budget and print a table, e.g. torch-encoder,exact,performer "
                        "(writes no checkpoints)")
    c = p.add_argument_group("comparison (--compare)")
    c.add_argument("--lrs", type=_positive_floats,
                   help=f"learning rates to sweep (default {','.join(f'{x:g}' for x in SWEEP_LRS)})")
    c.add_argument("--seeds", type=positive_int, help="seeds per recipe: --seed, --seed + 1, ... (default 3)")
    c.add_argument("--quick", action="store_true", help="one recipe: the first of --recipe (default cosine) at --lr")
    c.add_argument("--csv", help="write one row per (model, recipe, seed) to this CSV file")
    s = p.add_argument_group("step time (--step-time)")
    s.add_argument("--step-time", type=_name_list(tuple(a for a in ARCHS if a != "tinylm") + tuple(ATTENTIONS),
                                                  "model"),
                   help="time training steps of several models side by side, e.g. sdpa,torch-encoder")
    s.add_argument("--rounds", type=positive_int, help="interleaved rounds for --step-time (default 7)")
    return p


MODEL_ARGS = ("attention", "positions", "init", "block_size", "dim", "depth", "heads", "ff_mult", "dropout", "causal",
              "proj_len", "linformer_sharing", "nb_features", "redraw_interval")
TRAIN_ARGS = ("arch", "data", "objective", "steps", "batch_size", "warmup", "eval_interval", "eval_batches", "seed",
              "ckpt_interval", "lr", "min_lr", "weight_decay", "grad_clip", "ef_lr_scale", "mask_prob", "device")


def config_from_args(args, base=None):
    """TrainConfig from parsed CLI args: the options given override `base` (default TrainConfig()).

    `out` is not set here: main() decides it (--out, --no-save, --resume, DEFAULT_OUT)."""
    base = TrainConfig() if base is None else base
    model = replace(base.model, **{k: getattr(args, k) for k in MODEL_ARGS if getattr(args, k) is not None})
    if args.causal is None and args.resume is None:  # derive: a text MLM, or a Linformer layer on a task
        objective, task = args.objective or base.objective, (args.data or base.data) in TASKS
        if (objective == "mlm" and not task) or (task and "linformer" in model.layer_attention()):
            model = replace(model, causal=False)
    given = {k: getattr(args, k) for k in TRAIN_ARGS if getattr(args, k) is not None}
    config = replace(base, model=model, **given)
    recipe = getattr(args, "recipe", None)
    if recipe is not None and not getattr(args, "compare", None):  # --compare sweeps the recipes itself
        config = replace(config.with_recipe(recipe if isinstance(recipe, str) else recipe[0]), **given)
    return config


def sweep_from_args(args, config):
    """(recipes, lrs, seeds) for --compare; explicit --warmup/--weight-decay/... stay fixed over the sweep."""
    recipes = [args.recipe] if isinstance(args.recipe, str) else (args.recipe or list(RECIPES))
    if args.quick:
        return recipes[:1] if args.recipe else [DEFAULT_RECIPE], [config.lr], _seeds(args, config)
    return recipes, args.lrs or list(SWEEP_LRS), _seeds(args, config)


def config_summary(config):
    """One line: what is trained, at which size, for how long (the whole config with --verbose)."""
    m = config.model
    attention = m.attention if isinstance(m.attention, str) else "+".join(m.attention)
    model = f"{config.arch} ({attention} attention)" if config.arch == "tinylm" else config.arch
    return (f"{model}, {'causal' if m.causal else 'masked'} LM, L={m.block_size}, d={m.dim}, {m.depth} layers, "
            f"{m.heads} heads; {config.steps} steps, batch {config.batch_size}, lr {config.lr:g}, "
            f"seed {config.seed}, data {config.data} (--verbose prints the whole configuration)")


def _seeds(args, config):
    return list(range(config.seed, config.seed + (3 if args.seeds is None else args.seeds)))


def main(argv=None):
    """`python -m minilin train`: returns 0 on success; raises UsageError for a mistake in the command."""
    args = build_parser().parse_args(argv)
    if args.step_time:
        return _step_time(args)
    if args.rounds is not None:
        raise UsageError("--rounds belongs to --step-time: add --step-time MODELS or drop it")
    if args.compare and (args.out or args.resume or args.history):
        raise UsageError("--compare trains several models and writes no checkpoint or history: drop --out, "
                         "--resume and --history")
    if not args.compare and (args.lrs or args.seeds or args.quick or args.csv):
        raise UsageError("--lrs, --seeds, --quick and --csv belong to --compare: add --compare MODELS or drop them")
    if args.quick and args.lrs:
        raise UsageError("--quick trains at --lr only: drop --lrs, or drop --quick to sweep them")
    rank = distributed_env()[0]
    say = print if rank == 0 else None
    try:
        base = None
        if args.resume:
            base = checkpoint_config(read_lm_checkpoint(args.resume), args.resume)
            base = replace(base, out=None, device="auto")  # the checkpoint's machine and file are not this run's
        config = config_from_args(args, base)
        if args.compare:
            names = [args.compare] if isinstance(args.compare, str) else args.compare
            data = check_compare(names, config)
            recipes, lrs, seeds = sweep_from_args(args, config)
            if args.csv and rank == 0:
                check_writable(args.csv, option="--csv", what="the comparison table")
        else:
            config = replace(config, out=None if args.no_save else (args.out or args.resume or DEFAULT_OUT))
            if args.history and rank == 0:
                check_writable(args.history, option="--history", what="the history")
            run = start_run(config, resume=args.resume)
    except ValueError as err:  # every check above names the fix; CheckpointError is a ValueError
        raise UsageError(str(err)) from None
    if args.compare:
        fixed = {k: getattr(config, k) for k in RECIPES[DEFAULT_RECIPE] if getattr(args, k, None) is not None}
        writer = None
        if args.csv and rank == 0:
            import shlex
            import sys
            writer = CsvWriter(args.csv, command="python -m minilin train " + shlex.join((
                sys.argv[2:] if argv is None else argv)), notes=[
                f"sweep: recipes {','.join(recipes)} x lr {','.join(f'{x:g}' for x in lrs)} x seeds "
                f"{','.join(map(str, seeds))}; {config.steps} steps, batch {config.batch_size}, "
                f"L={config.model.block_size}, d={config.model.dim}, depth {config.model.depth}, "
                f"heads {config.model.heads}, data {config.data}, objective {config.objective}"])
        rows = compare(names, config, recipes=recipes, lrs=lrs, seeds=seeds, data=data, fixed=fixed,
                       progress=not args.no_progress, log=say, on_row=writer)
        if say:
            say(format_table(rows))
            if args.csv:
                say(f"csv: {args.csv}")
            say(f"device {resolve_device(config.device)}, torch {torch.__version__}, "
                f"{torch.get_num_threads()} threads")
        return 0
    if say:
        say(config_summary(config) if not args.verbose else f"{config}")
        say(f"checkpoint: {config.out}" if config.out else "checkpoint: none (--no-save)")
    try:
        history = run_steps(run, progress=not args.no_progress, log=say)
    finally:
        run.close()
    if say:
        say(f"{history.params:,} parameters, {1e3 * history.step_time():.1f} ms/step, final val bits/byte "
            f"{history.val_bits[-1]:.4f}" + (f", checkpoint {config.out} (step {run.step})" if config.out else ""))
    if args.history and rank == 0:
        Path(args.history).parent.mkdir(parents=True, exist_ok=True)  # checked before training, created now
        Path(args.history).write_text(json.dumps(history.to_dict()))
    return 0



def _step_time(args):
    from minilin.train.steptime import format_step_times, step_times
    reset_progress("nothing was written (--step-time prints its table at the end)")
    names = [args.step_time] if isinstance(args.step_time, str) else args.step_time
    if len(names) < 2:
        raise UsageError("--step-time compares models: give at least two, e.g. --step-time sdpa,torch-encoder")
    if args.compare or args.resume or args.out or args.history or args.csv:
        raise UsageError("--step-time only times steps: drop --compare, --resume, --out, --history and --csv")
    rounds = 7 if args.rounds is None else args.rounds
    try:
        config = config_from_args(args)
        data = check_compare(names, config)
        device = resolve_device(config.device)
    except ValueError as err:
        raise UsageError(str(err)) from None
    result = step_times(names, config, rounds=rounds, steps=5, device=device, data=data)
    print(format_step_times(result, names, config, rounds, 5))
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    return 0
