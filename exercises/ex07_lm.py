"""Exercises for notebook 07: the pieces of a byte-level language model's training loop.

Implement each function, then grade yourself:  python -m minilin grade --chapter 7
Conventions (see minilin/data.py): tokens are UTF-8 bytes (ids 0..255), MASK_ID = 256 marks a hidden
position, and a target of -100 means "no loss here". Do not call minilin.data / minilin.train here.
"""
import torch

MASK_ID = 256
IGNORE = -100


def encode_bytes(text):
    """Task 7.1 (a): text -> (N,) long tensor of its UTF-8 bytes.

    "é" is two bytes (0xC3, 0xA9), so N = len(text.encode("utf-8")), not len(text).
    Hint: `text.encode("utf-8")` is a bytes object; `list(b)` gives its ints.
    """
    raise NotImplementedError("Task 7.1")


def decode_bytes(ids):
    """Task 7.1 (b): (N,) ids in 0..255 -> text, the inverse of encode_bytes.

    Sampled bytes need not be valid UTF-8 (a model can emit half a character): decode with
    errors="replace" so that invalid sequences become U+FFFD instead of raising.
    Hint: `bytes(ids.tolist()).decode(...)`.
    """
    raise NotImplementedError("Task 7.1")


def shift_for_next_token(window):
    """Task 7.2: a (B, L + 1) window of tokens -> (inputs (B, L), targets (B, L)).

    A causal LM at position t reads tokens 0..t and must predict token t + 1, so targets[:, t] is
    window[:, t + 1]. Getting this shift wrong by one trains a model to copy its input (loss → 0, useless).
    """
    raise NotImplementedError("Task 7.2")


def lm_loss(logits, targets):
    """Task 7.3 (a): mean cross-entropy in nats over the positions whose target is not IGNORE.

    logits: (B, L, V) unnormalised scores, targets: (B, L) ints in 0..V-1 or IGNORE  ->  scalar tensor
    loss = mean over kept positions of -log softmax(logits)[target]. Use torch.log_softmax (stable) and
    gather; do not call F.cross_entropy.
    """
    raise NotImplementedError("Task 7.3")


def bits_per_byte(loss_nats):
    """Task 7.3 (b): a loss in nats per byte -> bits per byte (a float).

    A model that knows nothing (uniform over 256 bytes) scores log2(256) = 8 bits per byte; gzip gets ~2-3
    on English text. Hint: 1 nat = 1 / ln 2 bits.
    """
    raise NotImplementedError("Task 7.3")


def mask_for_mlm(tokens, *, generator, mask_prob=0.15):
    """Task 7.4: BERT's masked-LM corruption -> (corrupted, targets), both shaped like tokens.

    Select each position with probability mask_prob (torch.rand(..., generator=generator) < mask_prob).
    A selected position becomes MASK_ID with probability 0.8, a uniformly random byte (0..255) with
    probability 0.1, and keeps its byte with probability 0.1. targets = the original byte at selected
    positions, IGNORE elsewhere. Unselected positions of `corrupted` equal `tokens`.
    Draw every random number from `generator`.
    """
    raise NotImplementedError("Task 7.4")


def lr_at(step, *, lr, steps, warmup, min_lr):
    """Task 7.5: the learning rate at 0-based `step`: linear warm-up, then cosine decay.

    step < warmup:  lr · (step + 1) / warmup
    otherwise:      min_lr + (lr - min_lr) · (1 + cos(π · p)) / 2,  p = min(1, (step - warmup) / max(1, steps - warmup))
    Return a float.
    """
    raise NotImplementedError("Task 7.5")


def save_checkpoint(obj, path):
    """Task 7.6 (a): torch.save `obj` to `path` atomically.

    A crash (or an object that fails to pickle) half-way through must never leave a truncated file at `path`:
    write to a temporary file in the same folder, then `os.replace(tmp, path)` (atomic). Remove the temporary
    file if saving fails, and re-raise the error.
    """
    raise NotImplementedError("Task 7.6")


def load_checkpoint(path):
    """Task 7.6 (b): load a checkpoint without running arbitrary code: torch.load(..., weights_only=True).

    A pickle can execute anything when loaded; weights_only=True accepts only tensors and plain containers
    (dict, list, int, float, str, ...) and raises pickle.UnpicklingError for anything else.
    Load to the CPU (map_location="cpu").
    """
    raise NotImplementedError("Task 7.6")
