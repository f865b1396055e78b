"""Checkpoint files: atomic writes, weights-only reads, and errors that say what to do.

A save writes a hidden temporary file next to the target (`.NAME.tmpPID`), fsyncs it, then renames it over
the target: readers see the old checkpoint or the new one, never half of one. Ctrl-C during a save is held
until the save ends (torch.save's zip writer, cut by KeyboardInterrupt, fails with a RuntimeError of its own),
then raised. An exception or SIGTERM during the save removes the temporary file; a save killed outright (SIGKILL, power cut) cannot, so the next
save into the same folder removes temporary files whose process is gone.

A load uses torch.load(weights_only=True) (tensors and plain containers only: a checkpoint cannot run code
when it is opened). A missing, empty, truncated, corrupt or foreign file raises CheckpointError (a
ValueError) with one line that names the file and the fix.
"""
import glob
import os
import re
import signal
import threading
import warnings
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist

CHECKPOINT_FORMAT = "minilin-lm-1"  # the "format" entry of a checkpoint written by minilin.train


class CheckpointError(ValueError):
    """A file that cannot be used as a checkpoint; the message names the file and the fix."""


def _temp_path(path):
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _process_exists(pid):
    if os.name == "nt":  # os.kill(pid, 0) there sends CTRL_C_EVENT: never ask, never delete
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return pid > 0  # someone else's live process (or a pid we cannot ask about): leave its file alone
    return True


def remove_stale_temp_files(path):
    """Delete `.NAME.tmpPID` files next to `path` left by saves whose process no longer exists."""
    path = Path(path)
    pattern = re.compile(re.escape(f".{path.name}.tmp") + r"(\d+)")
    for leftover in path.parent.glob(glob.escape(f".{path.name}.tmp") + "*"):
        match = pattern.fullmatch(leftover.name)
        if match and int(match.group(1)) != os.getpid() and not _process_exists(int(match.group(1))):
            leftover.unlink(missing_ok=True)


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the save's `finally`, unlike the default handler


class _CleanExitOnSigterm:
    """While saving, turn SIGTERM (torchrun, schedulers, `kill`) into SystemExit so `finally` cleans up.

    Only where the default handler is installed (a program with its own handler keeps it) and only on the
    main thread (Python delivers signals there).
    """

    def __enter__(self):
        self.previous = None
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
            self.previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


class deferred_interrupt:
    """Hold Ctrl-C (SIGINT) until the block ends, then raise KeyboardInterrupt.

    Only where Python's default SIGINT handler is installed and on the main thread; nested blocks hold it
    until the outermost one ends (e.g. a save and the note of what it saved).
    """

    _holding = False

    def __enter__(self):
        self.installed, self.hit = False, False
        if (threading.current_thread() is threading.main_thread() and not deferred_interrupt._holding
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self.previous = signal.signal(signal.SIGINT, self._hold)
            deferred_interrupt._holding = self.installed = True
        return self

    def _hold(self, signum, frame):
        self.hit = True

    def __exit__(self, exc_type, *exc):
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)
            deferred_interrupt._holding = False
            if self.hit and exc_type is None:
                raise KeyboardInterrupt
        return False


def save_checkpoint(obj, path):
    """torch.save `obj` to `path` atomically (temporary file in the same folder, fsync, os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path)
    tmp = _temp_path(path)
    with deferred_interrupt(), _CleanExitOnSigterm():
        try:
            with open(tmp, "wb") as f:
                torch.save(obj, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # atomic on POSIX and Windows (same filesystem)
        finally:
            tmp.unlink(missing_ok=True)


def check_writable(path, option="--out", what="the checkpoint"):
    """Raise ValueError unless a file can be written at `path`; leaves the disk as it found it.

    Called before the first training step, so a bad --out fails at once, not when the first save comes.
    Folders it had to create for the check are removed again (the writer creates them when it writes), so a run
    stopped before its first save (Ctrl-C) leaves no empty checkpoints/ behind.
    option, what: the command-line option and the file's role, for the message.
    """
    path = Path(path)
    head = f"cannot write {what} {path} ({option})"
    fix = f"pass another {option}" + (" (or --no-save)" if option == "--out" else "")
    if path.is_dir():
        raise ValueError(f"{head}: it is a folder; {fix}, e.g. {option} {path / 'lm.pt'}")
    created = [p for p in [path.parent, *path.parent.parents] if not p.exists() and not p.is_symlink()]
    try:
        _check_writable_in(path, head, fix)
    finally:
        for folder in created:  # deepest first; one that now holds something (another writer's) stays
            try:
                folder.rmdir()
            except OSError:
                break


def _check_writable_in(path, head, fix):
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"{head}: a file is in the way of its folder {path.parent}; {fix}") from None
    except OSError as err:
        raise ValueError(f"{head}: cannot create its folder {path.parent} ({err.strerror}); {fix}") from None
    probe = _temp_path(path)
    try:
        with open(probe, "wb"):
            pass
    except OSError as err:
        raise ValueError(f"{head}: cannot write in {path.parent} ({err.strerror}); {fix}") from None
    finally:
        probe.unlink(missing_ok=True)


def load_checkpoint(path, map_location="cpu"):
    """torch.load(path, weights_only=True) with one clear CheckpointError for a file that is not readable."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: check the path, or train one first "
                              f"(`python -m minilin train --out {path}`)")
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file: pass the .pt file inside it "
                              f"(e.g. {path / 'lm.pt'})")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path} is empty (0 bytes), not a minilin checkpoint: the save that wrote it was cut "
                              f"short; train again or pass another checkpoint")
    try:  # torch warns about odd bytes (e.g. "pickle protocol 124") before it fails: keep those off a user's stderr
        with warnings.catch_warnings(record=True) as held:
            warnings.simplefilter("always")
            loaded = torch.load(path, map_location=map_location, weights_only=True)
        for w in held:  # a load that worked gives its warnings back as they were
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return loaded
    except OSError as err:
        raise CheckpointError(f"cannot read {path} ({err.strerror}); check its permissions") from None
    except Exception as err:  # torch raises many kinds (UnpicklingError, RuntimeError, EOFError, ...) for bad bytes
        raise CheckpointError(f"{path} is not a minilin checkpoint that can be loaded safely (corrupt, truncated, "
                              f"or holding more than tensors: {type(err).__name__}); pass a file written by "
                              f"`python -m minilin train`, or train again") from None


def read_lm_checkpoint(path, map_location="cpu"):
    """The dict a `minilin train` run saved, checked for its format and entries; else CheckpointError."""
    ckpt = load_checkpoint(path, map_location=map_location)
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        found = (f"a {type(ckpt).__name__}" if not isinstance(ckpt, dict) else "a dict without a 'format' entry"
                 if "format" not in ckpt else f"format {ckpt['format']!r}")
        raise CheckpointError(f"{path} is not a minilin checkpoint ({found}; expected format {CHECKPOINT_FORMAT!r}): "
                              f"pass a file written by `python -m minilin train`")
    missing = [key for key in ("config", "model", "step") if key not in ckpt]
    if missing:
        raise CheckpointError(f"{path} is not a minilin checkpoint: it has no {', '.join(missing)}; "
                              f"pass a file written by `python -m minilin train`")
    return ckpt


# ---- a training run's state (minilin.train.Run) ---------------------------------------------------------

def _rng_state(run):
    state = {"data": run.data_gen.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if run.world > 1:  # every rank has its own generators: gather them so that each gets its own back
        gathered = [None] * run.world
        dist.all_gather_object(gathered, state)
        return gathered
    return [state]


def save_run(run):
    """Write everything the next step of `run` depends on to run.path (call on every rank: it gathers the
    ranks' random generators; rank 0 writes)."""
    rng = _rng_state(run)  # collective: every rank takes part
    if run.rank == 0:
        save_checkpoint({"format": CHECKPOINT_FORMAT, "config": asdict(run.config), "step": run.step,
                         "world_size": run.world, "model": run.model.state_dict(),
                         "optimizer": run.optimizer.state_dict(), "history": run.history.to_dict(), "rng": rng},
                        run.path)
    if run.world > 1:
        dist.barrier()


def load_weights(model, ckpt, path):
    """model.load_state_dict(ckpt["model"]), or CheckpointError if the weights do not fit."""
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError:
        raise CheckpointError(f"{path}: its weights do not fit the model its config describes (an edited file, or "
                              f"one from another version of minilin); train again") from None


def restore_run(run, ckpt, path):
    """Put a checkpoint's weights, AdamW state, random generators, history and step into `run` (whose model
    the caller has checked to be the checkpoint's)."""
    load_weights(run.model, ckpt, path)
    try:
        run.optimizer.load_state_dict(ckpt["optimizer"])
        rng = ckpt["rng"][run.rank]
        run.data_gen.set_state(rng["data"])
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        for key, value in ckpt["history"].items():
            setattr(run.history, key, value)
    except (KeyError, IndexError, ValueError, RuntimeError, TypeError) as err:
        raise CheckpointError(f"{path} cannot be resumed: its optimizer or random state is incomplete "
                              f"({type(err).__name__}); start a new run instead") from None
    run.step = int(ckpt["step"])
