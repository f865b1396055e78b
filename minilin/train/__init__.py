"""Train the tiny byte-level LM; `python -m minilin train` is its command line (`python -m minilin sample`,
in minilin/sample.py, generates text from the checkpoint it writes).

    config    TrainConfig (every value checked by validate()), History, the checkpoint's config dict
    loop      schedule, AdamW groups, evaluation, Run / start_run / run_steps / train, load_model
    compare   the reference benchmark: several models, one budget, one table
    cli       the command line: main, build_parser, config_from_args

From Python (notebooks): `history = train(TrainConfig(...), progress=False)`; `history.model` is the trained
model, `history.loss` the per-step training loss, `history.val_bits` the validation bits per byte. The Python
API writes a checkpoint only when `TrainConfig.out` is set; the command line writes checkpoints/lm.pt unless
told otherwise. Checkpoint files (atomic writes, weights-only reads): minilin/checkpoint.py.
"""
from minilin.checkpoint import CHECKPOINT_FORMAT, CheckpointError, load_checkpoint, save_checkpoint
from minilin.train.cli import MODEL_ARGS, TRAIN_ARGS, build_parser, config_from_args, main
from minilin.train.compare import check_compare, compare, compare_configs, format_table
from minilin.train.config import DEFAULT_OUT, History, TrainConfig, config_from_dict, config_to_dict
from minilin.train.loop import (
    Run,
    check_compatible,
    evaluate,
    is_linformer_projection,
    load_model,
    lr_at,
    make_optimizer,
    rank_seed,
    run_steps,
    start_run,
    train,
)
