"""Exercises for notebook 07. Core: the loss and the schedule of the training loop (Tasks 7.3 and 7.5), the chapter's
decoding idea on a new attention (Task 7.8: one recurrent step with a state of constant size), a prediction of its
decoding finding on new sizes (Task 7.9), and a test of one explanation of the swap's cost (Task 7.10:
how much of the cost does a token shift close? predict, then measure). Optional: data and file handling,
7.1 (cut text to a byte budget), 7.2 (targets across documents) and 7.6 (checkpoints); 7.4 (masked-LM corruption)
and 7.7 (nucleus sampling: use the idea on a new case).

Implement each function, then grade yourself:  python -m minilin grade --chapter 7
Conventions (see minilin/data.py): tokens are UTF-8 bytes (ids 0..255), MASK_ID = 256 marks a hidden
position, and a target of -100 means "no loss here". Do not call minilin.data, minilin.train or
minilin.efficient here.

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import os  # noqa: F401  (the hints name os.replace)

import torch

MASK_ID = 256
IGNORE = -100


def truncate_utf8(ids, max_bytes):
    """Task 7.1 (optional, data handling): the longest prefix of UTF-8 bytes within max_bytes that cuts no character.

    Uses notebook 07, section 1 ("Bytes are tokens") on a case it does not solve: the notebook shows that a cut in
    the middle of a character decodes to U+FFFD; here you cut a text to a byte budget (a context window, a field of
    fixed size) so that it never happens.
    ids: (N,) long tensor of valid UTF-8 bytes, max_bytes: int >= 0  ->  (M,) long tensor, M <= max_bytes, a prefix
    of ids that decodes without U+FFFD, as long as possible. If the whole text fits, return it all. The checks use
    ASCII, accented, CJK and emoji text at every budget from 0 to past the end.

    Hint 1 (nudge): in UTF-8, how do you tell from one byte whether it starts a character or continues one? Look at
        its two highest bits.
    Hint 2 (plan): if everything fits, you are done. Otherwise look at the first byte you would drop: if it continues
        a character, that character would be cut, so move the cut back until the first dropped byte starts a
        character.
    Hint 3 (formula): a continuation byte has 1 then 0 as its two highest bits (binary 10xxxxxx); start the cut at
        the budget (or the end, if sooner) and move it back while the first byte it would drop continues a
        character; keep the bytes before the cut.
    """
    raise NotImplementedError("Task 7.1")


def shift_with_documents(window, eos):
    """Task 7.2 (optional, data handling): next-byte inputs and targets for a window that holds several documents.

    Uses notebook 07, section 2 ("Batches and the shift") on a case it does not solve: packed training data puts
    documents one after another, each ended by an `eos` byte. The byte after an `eos` starts a new, unrelated
    document: the byte before tells nothing about it, and here it carries no loss (target IGNORE). That is a choice:
    GPT-2 and nanoGPT keep it, since a document's first byte has a learnable distribution of its own.
    window: (B, L + 1) long tensor, eos: int  ->  (inputs (B, L), targets (B, L)): inputs[:, t] = window[:, t],
    targets[:, t] = window[:, t + 1], except IGNORE wherever inputs[:, t] == eos. Do not modify `window`. The checks
    use four window shapes, with eos bytes at random places, at the start and at the end.

    Hint 1 (nudge): start from the plain shift of section 2. At which positions does the input byte end a document?
    Hint 2 (plan): the inputs and targets as two slices of the window; a bool mask of the positions whose input is
        eos; the targets at those positions replaced by IGNORE, in a tensor that is not a view of `window`.
    Hint 3 (formula): the inputs are every byte but the last, the targets every byte but the first, and each
        target whose input byte is eos becomes IGNORE, written into a copy so that the window stays unchanged.
    """
    raise NotImplementedError("Task 7.2")


def lm_loss(logits, targets):
    """Task 7.3: mean cross-entropy in nats over the positions whose target is not IGNORE.

    Revisits notebook 07, sections 3 and 5 (the loss, and the training loop).
    logits: (B, L, V) unnormalised scores, targets: (B, L) ints in 0..V-1 or IGNORE  ->  scalar tensor
    loss = mean over kept positions of -log softmax(logits)[target]. Use torch.log_softmax (stable) and
    gather; do not call torch.nn.functional.cross_entropy. The checks use two shapes (V = 256 and V = 11),
    with and without ignored targets, and uniform logits.

    Hint 1 (nudge): at each position you need one number: the log-probability of its target. How do you pick one
        entry per position along the V axis? And what happens if you use -100 as an index?
    Hint 2 (plan): two stages; write down the shape you expect after each before you code it. First one number
        per position, its target's log-probability, read by a lookup that must not fail on the ignored
        positions; then an average that counts only the kept ones. How will the second stage know which?
    Hint 3 (formula): the loss is minus the average, over the kept positions only, of the log-probability each
        gives its own target; an ignored position must be given some valid index to read, then count for nothing.
    """
    raise NotImplementedError("Task 7.3")


def mask_for_mlm(tokens, *, generator, mask_prob=0.15):
    """Task 7.4 (optional): BERT's masked-LM corruption -> (corrupted, targets), both shaped like tokens.

    Linformer cannot be causal (notebook 03): it trains
    as a masked LM instead (BERT, Devlin et al. 2018, arXiv 1810.04805), on inputs corrupted this way.
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


def wsd_lr(step, *, lr, steps, warmup, decay, min_lr):
    """Task 7.5: a warm-up, stable, decay (WSD) learning-rate schedule at 0-based `step`.

    Section 5 of notebook 07 trains at a constant rate; this is a schedule no cell computes: the rate rises in a
    straight line over the first `warmup` steps, stays at lr, then falls in a straight line over the last `decay`
    steps, reaching min_lr at step `steps` and staying there for any later step. Long runs use it because a run can
    be stopped (decay started) at any point. The warm-up's first step already has a rate (lr / warmup) and its last
    reaches lr; the decay starts from lr at step steps - decay. warmup + decay <= steps; warmup and decay may be 0.
    Return a float. The checks use four schedules at every step, and past the last.

    Hint 1 (nudge): check the ends: the rate at step 0, at the last warm-up step, at step steps - decay, at step
        `steps` and later. With decay = 0, what is the rate at step `steps`?
    Hint 2 (plan): three cases by step: warming up, stable, decaying; in the last, the fraction of the decay done so
        far, clipped at 1, interpolates between lr and min_lr. Plain Python arithmetic; no tensors needed.
    Hint 3 (formula): past the end, the floor; while warming up, lr times the share of the warm-up done, counting
        the current step as done; then lr until the decay starts; in the decay, lr moved towards min_lr by the
        share of the decay done.
    """
    raise NotImplementedError("Task 7.5")


def save_checkpoint(obj, path):
    """Task 7.6 (a, optional, file handling): torch.save `obj` to `path` atomically.

    Saves the state of a training loop like section 5's (the package's `train` checkpoints the same way).
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
    """Task 7.6 (b, optional, file handling): load a checkpoint without running arbitrary code (weights only).

    Loads what Task 7.6 (a) saves.
    A pickle can execute anything when loaded; loading with weights_only=True accepts only tensors and plain
    containers (dict, list, int, float, str, ...) and raises pickle.UnpicklingError for anything else.
    Load to the CPU (map_location="cpu"). The checks read the arguments torch.load gets.

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

    Extends notebook 07, section 6 ("Make it write"): the notebook samples with a temperature (and the package
    with top_k); no cell cuts the distribution by probability mass.
    logits: (..., V) float, top_p: float in (0, 1]  ->  a tensor shaped like logits: each row's logits where
    the token is in the row's nucleus, -inf elsewhere. The nucleus is the smallest set of the likeliest tokens
    (by softmax probability) whose probabilities sum to at least top_p; it always holds the likeliest token.
    Sampling from the result samples from the nucleus, renormalised. The checks compare with a loop over
    each row on three shapes (V = 10, 257, 17, one of them 3-D), top_p = 1e-9 (only the likeliest) and 1.

    Hint 1 (nudge): sort each row's probabilities from the largest down. For the token in place r, what is the
        probability mass of the tokens placed before it, and when is it still needed to reach top_p?
    Hint 2 (plan): the decision is easy in sorted order, but the answer is needed in each token's own place.
        Decide in sorted order which places are kept, from the mass that comes before each place; then carry the
        decisions back to the original order (what must you keep from the sort to do that?).
    Hint 3 (formula): a place is kept when the mass of the places before it is still below top_p (so the first
        place always is); a kept token keeps its logit, every other token gets minus infinity.
    """
    raise NotImplementedError("Task 7.7")


def efficient_decode_step(q_t, k_t, v_t, state=None):
    """Task 7.8 (use the idea on a new case): one decoding step of causal efficient attention with a state of
    constant size.

    Extends notebook 07, section 7 ("Swap the attention": a decoding state of constant size), to the causal
    kernel of linear-attention-transformer (notebook 05, section 2, "The causal variant"): φ_q = softmax of q
    over its features, φ_k = exp(k), out_t = Σ_{j ≤ t} (φ_q(q_t)·φ_k(k_j)) v_j / Σ_{j ≤ t} φ_q(q_t)·φ_k(k_j):
    the plain per-token variant (the modules' default, blindspot_size=1; the bare causal_linear_attn function
    defaults to buckets of 64, which hide a query's own bucket of keys).
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
    Hint 3 (formula): the new S is the old one plus the outer product of the new key's features with the new
        value; the new z is the old one plus those features (both start at zero); the output is the query's
        features applied to the new S, divided by their dot product with the new z.
    """
    raise NotImplementedError("Task 7.8")


def predicted_crossover(heads, head_dim, features):
    """Task 7.9 (predict the finding): after how many tokens does a key/value cache outgrow a linear-attention state?

    Notebook 07, section 7 measures one case: at its sizes, after 64 bytes, the cache of exact attention holds more
    numbers than the state of linear attention, which does not grow. The state per head is S (features x head_dim)
    and z (features), as in Transformers are RNNs (the package adds a scalar stabiliser; ignore it).
    Predict, for any sizes, without building a model: the smallest number of tokens t >= 1 after which, in every
    layer and head, the key/value cache holds MORE numbers than the state, for a linear attention with `features`
    features per head (elu+1: features = head_dim; Performer: features = m).
    heads, head_dim, features: ints >= 1  ->  a Python int. The grader measures each case itself, on TinyLM's own
    decoding states (exact attention against Performer with m = features, and elu+1), and compares your answer with
    its measurement, at eight (heads, head_dim, features) triples you do not see. Before you run it, write down your
    answer for heads 4, head_dim 16, features 16 (the sizes of section 7) and for Performer's default
    m = int(head_dim · ln head_dim) at head_dim 64.

    Hint 1 (nudge): count what one head keeps. How many numbers does the cache add per token, and how many does the
        state hold whatever the number of tokens?
    Hint 2 (plan): the state's size for one head (a features x head_dim matrix and a vector of length features),
        the cache's size after t tokens for one head (keys and values); the heads and the layers multiply both sides
        alike; solve for the first t where the cache is larger.
    Hint 3 (formula): write "the cache after t tokens holds more than the state" as an inequality in t for one
        head, and find its smallest whole-number solution. Test your rule on sizes where the two counts are equal
        at some t: the cache must hold MORE, so that t is not yet the answer. Check it on section 7's sizes against
        the notebook's count after 64 bytes.
    """
    raise NotImplementedError("Task 7.9")


def shifted_linear_mix(q, k, v, mu):
    """Task 7.10 (predict, then measure): causal elu+1 linear attention whose keys and values are
    first mixed with the previous position's (token shift, as in RWKV).

    Tests one explanation of the swap's cost at notebook 07's 400 steps: the linear model grew no layer-0
    previous-byte head (section 7). With mu < 1, token shift blends the previous byte's key and value into every
    position's own; a head must still weight that slot. Does the shift close the gap because it stands in for the
    missing head, or because it helps any attention?
    The grader checks only this mixing step; the task's point, your prediction and your measurement below, is yours
    to check: no grader can.
    q, k, v: (B, H, N, D); mu: a float in [0, 1], or a (H,) tensor, one per head  ->  (B, H, N, D).
    k'_t = mu·k_t + (1 - mu)·k_{t-1} and v'_t = mu·v_t + (1 - mu)·v_{t-1}, with k_{-1} = v_{-1} = 0; then
    out_i = Σ_{j ≤ i} (φ(q_i)·φ(k'_j)) v'_j / Σ_{j ≤ i} φ(q_i)·φ(k'_j) with φ(x) = elu(x) + 1 and no 1/√D
    (notebook 07, section 3's formula; arXiv 2006.16236, section 3.3). mu = 1 is plain linear attention. Do not
    call minilin here. The checks compare with minilin's elu+1 linear attention on shifted keys and values in
    float64, on two shapes with a scalar and a per-head mu, at mu = 1 and mu = 0, and change the key and value at
    one position: no earlier output may move, and that position must be read.

    Then measure, in a cell of your own below section 7 (paste the function or import it from this file). Before
    you run anything, write down your prediction: after the same 400 steps, will the shifted model's gap to exact
    attention be about section 7's linear-minus-exact gap, about half of it, or close to nothing? Then train, on
    seeds 0, 1 and 2 (`train_lm(mix, seed=s)`, a minute or more per run on a laptop CPU), the shifted model
    (`lambda q, k, v: shifted_linear_mix(q, k, v, 0.5)`) and a second baseline: exact attention on the same shifted
    keys and values (your own mixing step: the shift, then `causal_softmax_mix`). Plain exact and plain linear
    attention on these seeds are in the appendix's stored table. Take each gap seed by seed (the runs are
    paired), against both baselines: plain exact, and exact on shifted keys and values. Evidence is a change in the
    gap larger than the spread of that gap over the three seeds; one seed cannot tell "the shift replaces the
    missing head" from "the shift helps both attentions".

    Hint 1 (nudge): the shift and the attention are two separate steps. What move along the position axis gives
        every position its predecessor's key, with zeros at position 0? And how does a mu of shape (H,) line up
        with the head axis of a (B, H, N, D) tensor?
    Hint 2 (plan): make the previous-position keys and values (shift by one along N, zeros first); mix each with
        the current ones by mu (a float, or the per-head values shaped to broadcast over B, N and D); then run causal
        elu+1 linear attention on q and the mixed keys and values (the notebook's masked form, or running sums over
        positions). Before training, test on a small input that changing position i + 1 leaves position i alone.
    Hint 3 (formula): the mixed key at t is mu times the key at t plus (1 - mu) times the key at t - 1 (zero at
        t = 0), and the same for values. Position i's output is the sum over j up to i of the weight φ(q_i)·φ(k'_j)
        times v'_j, divided by the sum of those weights.
    """
    raise NotImplementedError("Task 7.10")
