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
    The empty string gives an empty tensor, still of dtype long.

    Hints, one tier at a time (notebook 07, section 1):
      1. A str holds characters, not bytes. Which str method gives its UTF-8 bytes, and what do you get when
         you iterate over a bytes object?
      2. Plan: text -> a bytes object of N bytes -> a Python list of N ints in 0..255 -> an (N,) tensor. Say
         the dtype explicitly: a tensor built from an empty list would otherwise be float.
      3. The ids are the UTF-8 bytes of the text, each an integer 0..255, in a 1-D long tensor.
    """
    raise NotImplementedError("Task 7.1")


def decode_bytes(ids):
    """Task 7.1 (b): (N,) ids in 0..255 -> text, the inverse of encode_bytes.

    Sampled bytes need not be valid UTF-8 (a model can emit half a character): decode with
    errors="replace" so that invalid sequences become U+FFFD instead of raising.

    Hints, one tier at a time (notebook 07, section 1):
      1. Go the other way round: ids -> bytes -> str. Which built-in type turns a list of ints in 0..255 into
         bytes?
      2. Plan: the tensor as a plain Python list of ints; those ints as one bytes object; the bytes decoded as
         UTF-8, with invalid sequences replaced rather than raising.
      3. Turn the ids back into a bytes object and decode it as UTF-8, replacing what is not valid UTF-8
         (a cut multi-byte character) instead of raising.
    """
    raise NotImplementedError("Task 7.1")


def shift_for_next_token(window):
    """Task 7.2: a (B, L + 1) window of tokens -> (inputs (B, L), targets (B, L)).

    A causal LM at position t reads tokens 0..t and must predict token t + 1, so targets[:, t] is
    window[:, t + 1]. Getting this shift wrong by one trains a model to copy its input (loss → 0, useless).

    Hints, one tier at a time (notebook 07, section 2):
      1. Write out a window of 4 tokens a b c d by hand: which 3 are inputs, which 3 are targets, and how do
         the two lists line up?
      2. Plan: two slices along the position axis (dim 1), each of length L and each keeping all B rows: one
         drops the last token, the other drops the first.
      3. Inputs: every position but the last; targets: every position but the first (the same rows, shifted by
         one along the sequence axis).
    """
    raise NotImplementedError("Task 7.2")


def lm_loss(logits, targets):
    """Task 7.3 (a): mean cross-entropy in nats over the positions whose target is not IGNORE.

    logits: (B, L, V) unnormalised scores, targets: (B, L) ints in 0..V-1 or IGNORE  ->  scalar tensor
    loss = mean over kept positions of -log softmax(logits)[target]. Use torch.log_softmax (stable) and
    gather; do not call F.cross_entropy.

    Hints, one tier at a time (notebook 07, sections 2 and 4):
      1. At each position you need one number: the log-probability of its target. How do you pick one entry
         per position along the V axis? And what happens if you use -100 as an index?
      2. Plan: log-probabilities over V, (B, L, V); a (B, L) bool "keep" mask; an index of shape (B, L, 1)
         with every IGNORE replaced by a valid id; gather along the last axis, (B, L); drop the positions
         that are not kept; minus the mean over the rest.
      3. Formula: loss = −(1/K) Σ over the K kept positions of log softmax(logits)[target], where a position is
         kept when its target is not IGNORE (replace IGNORE by any valid id before indexing, then leave those
         positions out of the sum and of K).
    """
    raise NotImplementedError("Task 7.3")


def bits_per_byte(loss_nats):
    """Task 7.3 (b): a loss in nats per byte -> bits per byte (a float).

    A model that knows nothing (uniform over 256 bytes) scores log2(256) = 8 bits per byte; gzip gets ~2-3
    on English text. loss_nats may be a Python float or a 0-d tensor.

    Hints, one tier at a time (notebook 07, section 4, "Bits per byte"):
      1. Nats and bits are the same quantity in two units, like metres and feet: log base e against log base 2.
         How many bits is one nat?
      2. Plan: turn the input into a Python float, then divide it by one constant.
      3. 1 nat = 1 / ln 2 bits: bits = nats / ln 2, returned as a Python float.
    """
    raise NotImplementedError("Task 7.3")


def mask_for_mlm(tokens, *, generator, mask_prob=0.15):
    """Task 7.4: BERT's masked-LM corruption -> (corrupted, targets), both shaped like tokens.

    Select each position with probability mask_prob (torch.rand(..., generator=generator) < mask_prob).
    A selected position becomes MASK_ID with probability 0.8, a uniformly random byte (0..255) with
    probability 0.1, and keeps its byte with probability 0.1. targets = the original byte at selected
    positions, IGNORE elsewhere. Unselected positions of `corrupted` equal `tokens`.
    Draw every random number from `generator`.

    Hints, one tier at a time (notebook 07, section 2, "Masked LM"):
      1. One uniform number per position decides "selected or not". How can a second uniform number per
         position choose among three outcomes with probabilities 0.8, 0.1 and 0.1?
      2. Plan: three draws shaped like tokens, all from the generator: a uniform one for the selection, a
         uniform one for the choice, random bytes; a copy of tokens to corrupt; two bool masks (selected and
         "mask it", selected and "swap it") to write into that copy; targets full of IGNORE except at the
         selected positions. Never modify `tokens` itself.
      3. Formula: a position is selected when its first uniform draw is below mask_prob. Among the selected,
         a second uniform draw u below 0.8 means MASK_ID, u in [0.8, 0.9) means the random byte drawn for that
         position, otherwise the byte stays. Targets are IGNORE everywhere except the selected positions, which
         keep the original byte.
    """
    raise NotImplementedError("Task 7.4")


def lr_at(step, *, lr, steps, warmup, min_lr):
    """Task 7.5: the learning rate at 0-based `step`: linear warm-up, then cosine decay.

    step < warmup:  lr · (step + 1) / warmup
    otherwise:      min_lr + (lr - min_lr) · (1 + cos(π · p)) / 2,
                    with p = min(1, (step - warmup) / max(1, steps - warmup))
    Return a float.

    Hints, one tier at a time (notebook 07, section 4):
      1. Check the ends: what is the rate at step 0, at the last warm-up step, at step == warmup (p = 0) and
         once p reaches 1? With warmup = 0, which branch does step 0 take?
      2. Plan: one if for the warm-up; otherwise compute p, clipped at 1, then the cosine formula. Plain Python
         arithmetic on floats; no tensors needed.
      3. Formula: during warm-up the rate is lr·(step + 1)/warmup. After it, p is the fraction of the
         remaining steps done (steps − warmup of them, at least 1), capped at 1, and the rate is
         min_lr + (lr − min_lr)·(1 + cos(π·p))/2.
    """
    raise NotImplementedError("Task 7.5")


def save_checkpoint(obj, path):
    """Task 7.6 (a): torch.save `obj` to `path` atomically.

    A crash (or an object that fails to pickle) half-way through must never leave a truncated file at `path`:
    write to a temporary file in the same folder, then `os.replace(tmp, path)` (atomic). Remove the temporary
    file if saving fails, and re-raise the error.

    Hints, one tier at a time (notebook 07, section 4):
      1. If torch.save fails half-way, which file is damaged: the temporary one or `path`? Why must the
         temporary file sit in the same folder as `path` for the replace to be atomic?
      2. Plan: a temporary name next to `path`; inside try, save to it and then replace `path` with it; on any
         error, delete the temporary file if it exists and raise the error again. An earlier checkpoint at
         `path` stays untouched when saving fails.
      3. Write to a temporary file beside the target (same folder, so the rename cannot cross file systems),
         then rename it over the target in one atomic step (os.replace); if anything fails, even an interrupt,
         delete the temporary file and re-raise.
    """
    raise NotImplementedError("Task 7.6")


def load_checkpoint(path):
    """Task 7.6 (b): load a checkpoint without running arbitrary code: torch.load(..., weights_only=True).

    A pickle can execute anything when loaded; weights_only=True accepts only tensors and plain containers
    (dict, list, int, float, str, ...) and raises pickle.UnpicklingError for anything else.
    Load to the CPU (map_location="cpu").

    Hints, one tier at a time (notebook 07, section 4):
      1. Loading is one call; what matters is which keyword arguments you pass. What should happen to a file
         that holds something other than tensors and plain containers?
      2. Plan: one torch.load with two keyword arguments, its result returned as it is. Do not catch the
         error it raises for a suspicious file: the caller must see it.
      3. Load onto the CPU and with weights only (no arbitrary pickled code), so a file from a GPU machine or
         from someone else opens safely.
    """
    raise NotImplementedError("Task 7.6")
