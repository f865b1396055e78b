"""Exercises for notebook 07: the pieces of a byte-level language model's training loop, and two decoding
tasks the notebook does not solve (Tasks 7.7 and 7.8: use the idea on a new case).

Implement each function, then grade yourself:  python -m minilin grade --chapter 7
Conventions (see minilin/data.py): tokens are UTF-8 bytes (ids 0..255), MASK_ID = 256 marks a hidden
position, and a target of -100 means "no loss here". Do not call minilin.data, minilin.train or
minilin.efficient here.

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import math  # noqa: F401  (the hints name math.log and math.cos)
import os  # noqa: F401  (the hints name os.replace)

import torch

MASK_ID = 256
IGNORE = -100


def encode_bytes(text):
    """Task 7.1 (a): text -> (N,) long tensor of its UTF-8 bytes.

    Revisits notebook 07, section 1 ("Bytes are tokens").
    "é" is two bytes (0xC3, 0xA9), so N is the number of UTF-8 bytes, not the number of characters.
    The empty string gives an empty tensor, still of dtype long. The checks use ASCII, accented, CJK and emoji
    text, and the empty string.

    Hint 1 (nudge): a str holds characters, not bytes. Which str method gives its UTF-8 bytes, and what do you get
        when you iterate over a bytes object?
    Hint 2 (plan): text -> a bytes object of N bytes -> a Python list of N ints in 0..255 -> an (N,) tensor. Say
        the dtype explicitly: a tensor built from an empty list would otherwise be float.
    Hint 3 (formula): the ids are the UTF-8 bytes of the text, each an integer 0..255, in a 1-D long tensor.
    """
    raise NotImplementedError("Task 7.1")


def decode_bytes(ids):
    """Task 7.1 (b): (N,) ids in 0..255 -> text, the inverse of encode_bytes.

    Revisits notebook 07, section 1 ("Bytes are tokens").
    Sampled bytes need not be valid UTF-8 (a model can emit half a character): decode with
    errors="replace" so that invalid sequences become U+FFFD instead of raising. The checks include a text
    cut in the middle of a multi-byte character.

    Hint 1 (nudge): go the other way round: ids -> bytes -> str. Which built-in type turns a list of ints in
        0..255 into bytes?
    Hint 2 (plan): the tensor as a plain Python list of ints; those ints as one bytes object; the bytes decoded as
        UTF-8, with invalid sequences replaced rather than raising.
    Hint 3 (formula): turn the ids back into a bytes object and decode it as UTF-8, replacing what is not valid
        UTF-8 (a cut multi-byte character) instead of raising.
    """
    raise NotImplementedError("Task 7.1")


def shift_for_next_token(window):
    """Task 7.2: a (B, L + 1) window of tokens -> (inputs (B, L), targets (B, L)).

    Revisits notebook 07, section 2 ("Batches and the shift").
    A causal LM at position t reads tokens 0..t and must predict token t + 1, so targets[:, t] is
    window[:, t + 1]. Getting this shift wrong by one trains a model to copy its input (loss → 0, useless).
    The checks use four window shapes, B from 1 to 5 and L from 1 to 33.

    Hint 1 (nudge): write out a window of 4 tokens a b c d by hand: which 3 are inputs, which 3 are targets, and
        how do the two lists line up?
    Hint 2 (plan): two slices along the position axis (dim 1), each of length L and each keeping all B rows: one
        drops the last token, the other drops the first.
    Hint 3 (formula): inputs: every position but the last; targets: every position but the first (the same rows,
        shifted by one along the sequence axis).
    """
    raise NotImplementedError("Task 7.2")


def lm_loss(logits, targets):
    """Task 7.3 (a): mean cross-entropy in nats over the positions whose target is not IGNORE.

    Revisits notebook 07, sections 2 and 4 (the loss of the training loop).
    logits: (B, L, V) unnormalised scores, targets: (B, L) ints in 0..V-1 or IGNORE  ->  scalar tensor
    loss = mean over kept positions of -log softmax(logits)[target]. Use torch.log_softmax (stable) and
    gather; do not call torch.nn.functional.cross_entropy. The checks use two shapes (V = 256 and V = 11),
    with and without ignored targets, and uniform logits.

    Hint 1 (nudge): at each position you need one number: the log-probability of its target. How do you pick one
        entry per position along the V axis? And what happens if you use -100 as an index?
    Hint 2 (plan): log-probabilities over V, (B, L, V); a (B, L) bool "keep" mask; an index of shape (B, L, 1)
        with every IGNORE replaced by a valid id; gather along the last axis, (B, L); drop the positions that
        are not kept; minus the mean over the rest.
    Hint 3 (formula): loss = −(1/K) Σ over the K kept positions of log softmax(logits)[target], where a position
        is kept when its target is not IGNORE (replace IGNORE by any valid id before indexing, then leave those
        positions out of the sum and of K).
    """
    raise NotImplementedError("Task 7.3")


def bits_per_byte(loss_nats):
    """Task 7.3 (b): a loss in nats per byte -> bits per byte (a float).

    Revisits notebook 07, section 4 ("Bits per byte").
    A model that knows nothing (uniform over 256 bytes) scores log2(256) = 8 bits per byte; gzip gets ~2-3
    on English text. loss_nats may be a Python float or a 0-d tensor (the checks use both).

    Hint 1 (nudge): nats and bits are the same quantity in two units, like metres and feet: log base e against
        log base 2. How many bits is one nat?
    Hint 2 (plan): turn the input into a Python float, then divide it by one constant (math.log gives it).
    Hint 3 (formula): 1 nat = 1 / ln 2 bits: bits = nats / ln 2, returned as a Python float.
    """
    raise NotImplementedError("Task 7.3")


def mask_for_mlm(tokens, *, generator, mask_prob=0.15):
    """Task 7.4: BERT's masked-LM corruption -> (corrupted, targets), both shaped like tokens.

    Revisits notebook 07, section 2 ("Masked LM").
    Select each position independently with probability mask_prob.
    A selected position becomes MASK_ID with probability 0.8, a uniformly random byte (0..255, drawn for each
    position) with probability 0.1, and keeps its byte with probability 0.1. targets = the original byte at
    selected positions, IGNORE elsewhere. Unselected positions of `corrupted` equal `tokens`, and `tokens`
    itself must not change. Draw every random number from `generator`.
    The checks measure each rate (within 4 standard errors, on 16384 positions, and at mask_prob 0.3 on
    another shape), that the random bytes take many different values, that the same seed gives the same
    result, and that a second call on the same tensor still sees the original bytes.

    Hint 1 (nudge): one uniform number per position decides "selected or not". How can a second uniform number
        per position choose among three outcomes with probabilities 0.8, 0.1 and 0.1?
    Hint 2 (plan): three draws shaped like tokens, all from the generator: a uniform one for the selection, a
        uniform one for the choice, random bytes; a copy of tokens to corrupt; two bool masks (selected and
        "mask it", selected and "swap it") to write into that copy; targets full of IGNORE except at the
        selected positions. Never modify `tokens` itself.
    Hint 3 (formula): per position, P(selected) = mask_prob; given selected, P(MASK_ID) = 0.8, P(a random
        byte) = 0.1, P(unchanged) = 0.1, so a second uniform number u in [0, 1) cut into pieces of lengths 0.8, 0.1
        and 0.1 picks the outcome. target = the original byte when selected, IGNORE otherwise.
    """
    raise NotImplementedError("Task 7.4")


def lr_at(step, *, lr, steps, warmup, min_lr):
    """Task 7.5: the learning rate at 0-based `step`: linear warm-up, then cosine decay.

    Revisits notebook 07, section 4 ("The training loop", the schedule plotted there).
    The rate rises in a straight line over the first `warmup` steps, then falls along half a cosine wave from
    lr down to min_lr, reaching min_lr at step `steps` and staying there for any later step. With warmup > 0 the
    rate at step 0 is lr / warmup (not 0: step 0 already trains), and the last warm-up step (warmup - 1) and the
    first step after it (warmup) both have the rate lr. With warmup = 0 the schedule starts at lr at step 0.
    Return a float. The checks use three schedules (one without warm-up) at every step, and past the last.

    Hint 1 (nudge): check the ends: what is the rate at step 0, at the last warm-up step, at step == warmup
        and once the decay is over? With warmup = 0, which part of the schedule does step 0 belong to?
    Hint 2 (plan): one if for the warm-up; otherwise the fraction p of the decay done so far, clipped at 1,
        then a cosine of p (math.cos). Plain Python arithmetic on floats; no tensors needed.
    Hint 3 (formula): during warm-up the rate is lr times (step + 1) over warmup. After it, p is the number of
        steps since the warm-up ended divided by the number of decay steps (steps − warmup, at least 1), capped at
        1, and the rate is min_lr plus (lr − min_lr) times (1 + cos(π·p)) / 2.
    """
    raise NotImplementedError("Task 7.5")


def save_checkpoint(obj, path):
    """Task 7.6 (a): torch.save `obj` to `path` atomically.

    Revisits notebook 07, section 4, and its appendix ("Resume is bit-identical").
    A crash (or an object that fails to pickle) half-way through must never leave a truncated file at `path`:
    write to a temporary file in the same folder, then os.replace the temporary file over `path` (atomic).
    Remove the temporary file if saving fails, and re-raise the error.

    Hint 1 (nudge): if torch.save fails half-way, which file is damaged: the temporary one or `path`? Why must
        the temporary file sit in the same folder as `path` for the replace to be atomic?
    Hint 2 (plan): a temporary name next to `path`; inside try, save to it and then replace `path` with it; on any
        error, delete the temporary file if it exists and raise the error again. An earlier checkpoint at
        `path` stays untouched when saving fails.
    Hint 3 (formula): write to a temporary file beside the target (same folder, so the rename cannot cross file
        systems), then rename it over the target in one atomic step (os.replace); if anything fails, even an
        interrupt, delete the temporary file and re-raise.
    """
    raise NotImplementedError("Task 7.6")


def load_checkpoint(path):
    """Task 7.6 (b): load a checkpoint without running arbitrary code (torch.load with weights only).

    Revisits notebook 07, section 4, and its appendix.
    A pickle can execute anything when loaded; loading with weights_only=True accepts only tensors and plain
    containers (dict, list, int, float, str, ...) and raises pickle.UnpicklingError for anything else.
    Load to the CPU (map_location="cpu").

    Hint 1 (nudge): loading is one call; what matters is which keyword arguments you pass. What should happen to
        a file that holds something other than tensors and plain containers?
    Hint 2 (plan): one torch.load with two keyword arguments, its result returned as it is. Do not catch the
        error it raises for a suspicious file: the caller must see it.
    Hint 3 (formula): load onto the CPU and with weights only (no arbitrary pickled code), so a file from a GPU
        machine or from someone else opens safely.
    """
    raise NotImplementedError("Task 7.6")


def top_p_filter(logits, top_p):
    """Task 7.7 (use the idea on a new case): nucleus (top-p) filtering of next-byte logits.

    Extends notebook 07, section 6 ("Generation"): the notebook samples with a temperature (and the package
    with top_k); no cell cuts the distribution by probability mass.
    logits: (..., V) float, top_p: float in (0, 1]  ->  a tensor shaped like logits: each row's logits where
    the token is in the row's nucleus, -inf elsewhere. The nucleus is the smallest set of the likeliest tokens
    (by softmax probability) whose probabilities sum to at least top_p; it always holds the likeliest token.
    Sampling from the result samples from the nucleus, renormalised. The checks compare with a loop over
    each row on three shapes (V = 10, 257, 17, one of them 3-D), top_p = 1e-9 (only the likeliest) and 1.

    Hint 1 (nudge): sort each row's probabilities from the largest down. For the token in place r, what is the
        probability mass of the tokens placed before it, and when is it still needed to reach top_p?
    Hint 2 (plan): probabilities over the last axis; sort them (descending), keeping the sorting order; the mass
        before each place, an exclusive running sum (0 for the first); a "keep" flag per place; send the flags
        back to the tokens' own positions with the sorting order; -inf where not kept.
    Hint 3 (formula): with p_(1) ≥ p_(2) ≥ … the sorted probabilities of a row, place r is kept when
        Σ_{s < r} p_(s) < top_p (so place 1 always is); the token in a kept place keeps its logit, every other
        token gets −∞.
    """
    raise NotImplementedError("Task 7.7")


def efficient_decode_step(q_t, k_t, v_t, state=None):
    """Task 7.8 (use the idea on a new case): one decoding step of causal efficient attention with a state of
    constant size.

    Extends notebook 07, section 6 ("The recurrent form", "Decoding at constant memory"), to the causal
    kernel of linear-attention-transformer (notebook 05, section 3, "The causal variant"): φ_q = softmax of q
    over its features, φ_k = exp(k), out_t = Σ_{j ≤ t} (φ_q(q_t)·φ_k(k_j)) v_j / Σ_{j ≤ t} φ_q(q_t)·φ_k(k_j).
    q_t, k_t: (B, H, D), v_t: (B, H, Dv): the new token's query, key and value.
    state: None before the first token, else (S, z) with S = Σ_{j < t} φ_k(k_j) v_jᵀ (B, H, D, Dv) and
    z = Σ_{j < t} φ_k(k_j) (B, H, D).  Returns (out_t (B, H, Dv), (S', z')), the state now including token t.
    Inputs are O(1): exp(k) needs no stabiliser. The checks compare out_t with minilin's parallel causal
    forward and the state with the sums above, at the first, a middle and the last position, on two shapes.

    Hint 1 (nudge): the two sums over j ≤ t are the previous token's sums plus one new term each. Which term does
        token t add to S, and which to z?
    Hint 2 (plan): φ_q(q_t) and φ_k(k_t), (B, H, D); the new term of S, an outer product (B, H, D, Dv), and of
        z, (B, H, D); add them to the state (start from them when the state is None); the numerator contracts
        φ_q with S over D, (B, H, Dv), the denominator φ_q with z, (B, H); divide; return the output and the
        new state.
    Hint 3 (formula): S' = S + φ_k(k_t) v_tᵀ, z' = z + φ_k(k_t) (S = 0 and z = 0 before the first token);
        out_t = φ_q(q_t)ᵀ S' / φ_q(q_t)ᵀ z'.
    """
    raise NotImplementedError("Task 7.8")
