"""Exercises for notebook 09: decay, gates and the delta rule.

Implement each function, then grade yourself:  python -m minilin grade --chapter 9
Shapes follow the course convention: q, k (B, H, N, Dk), v (B, H, N, Dv); the state S is (B, H, Dk, Dv), one
Dk × Dv matrix per head, and a query reads it as o_t = S_tᵀ q_t / √Dk. Gates come as logarithms (log_alpha,
log_gate <= 0): the state is multiplied by exp(·), a number in (0, 1].
Do not call minilin in this file's functions (minilin.gated is the reference the grader compares with; read it
once you are done).

Core: start with 9.5 (about 60 minutes: gates in a chunked recurrence, the chapter's core skill), then 9.3
(about 45). Optional: 9.4 (a short warm-up, about 15 minutes) and the challenges 9.2 (about two hours) and 9.1
(two to three). Task 9.5 uses notebook 09's section 2 convention, o_t = S_tᵀ q_t with no 1/√Dk; 9.1 and 9.2 use
the package's scale.

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import math

import torch


def chunked_gated_delta(q, k, v, beta, log_alpha, chunk_size, initial_state=None):
    """Task 9.1 (optional, a challenge): the gated delta rule (Gated DeltaNet, arXiv 2412.06464, eq. 10) in chunks.

    q, k: (B, H, N, Dk), v: (B, H, N, Dv), beta: (B, H, N), log_alpha: (B, H, N) <= 0, chunk_size: a positive int
    (it need not divide N, and may exceed it), initial_state: (B, H, Dk, Dv) or None (zeros)
    ->  (o (B, H, N, Dv), final state (B, H, Dk, Dv))
    The recurrence is S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ, α_t = exp(log_alpha_t),
    o_t = S_tᵀ q_t / √Dk (the 1/√Dk scale is the package's default; the notebook passes scale=1.0).
    Extends notebook 09, section 2, which derives the chunk form of the delta rule without a gate (one triangular
    solve per chunk): here a decay, one number per head and token, multiplies the state before every write.
    Checked against the token-by-token definition for chunk sizes 1, 3, 4, 10 and 16 with N = 10, with an
    initial state and Dk != Dv, with α = 1 (the plain delta rule), with β = 0 (the initial state only fades),
    with keys that are not unit length, and with gates that close almost completely (log decays of −100 to −120
    a token: never form exp(±cumulative log decay) on its own). The checks also record the largest tensor you
    build (a whole (N × N) matrix per head fails) and count the torch operations on N = 128 tokens with chunks of
    8 and of 32: the count must fall with the chunk size, so a loop over the tokens fails.

    Hint 1 (nudge): inside a chunk, write the state after token i as the decayed start state plus a sum of
        decayed writes k_j δ_jᵀ, and ask what each decay factor is, measured from where to where.
    Hint 2 (plan): redo the notebook's derivation of δ_i with the gate. With b the cumulative log decay from the
        chunk's start, every term that held S_in gets the decay from the chunk's start to token i, and every
        term that held an earlier δ_j the decay from token j to token i; the triangular system keeps its shape,
        and the output and the next chunk's state gain the same kinds of factor.
    Hint 3 (formula): in words, take the notebook's three equations for Δ, O and S_out one at a time and ask, for
        each term, which stretch of the chunk its content has crossed (the chunk's start to token i, token j to
        token i, or token j to the chunk's end); that stretch's decay is the factor it gains. Before you run the
        grader, work a chunk of two tokens by hand and compare with two calls of minilin.gated.step in a scratch
        cell.
    """
    raise NotImplementedError("Task 9.1")


def chunked_gla(q, k, v, log_gate, chunk_size, initial_state=None):
    """Task 9.2 (optional, a challenge): gated linear attention (GLA, arXiv 2312.06635, eq. 3) in chunks, with a
    gate per key feature.

    q, k: (B, H, N, Dk), v: (B, H, N, Dv), log_gate: (B, H, N, Dk) <= 0, chunk_size: a positive int (it need not
    divide N, and may exceed it), initial_state: (B, H, Dk, Dv) or None (zeros)
    ->  (o (B, H, N, Dv), final state (B, H, Dk, Dv))
    The recurrence is S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ, o_t = S_tᵀ q_t / √Dk: each row d of the state (key
    feature d) has its own gate. Compute it chunk by chunk: inside a chunk a masked (c × c) matrix and a product
    with the chunk's values, plus what the carried state contributes; between chunks, one update of the state.
    Extends notebook 09, section 2 ("Why chunks"), which gives the chunked form for one scalar decay per head
    (retention) only: here the decay between tokens j and i differs from feature to feature, so it can no longer
    be pulled out of the product q_i · k_j. Checked against the token-by-token definition for chunk sizes 1, 3,
    4, 10 and 16 with N = 10, with an initial state and Dk != Dv, with gates wide open (log_gate = 0), and with
    gates that close almost completely (log gates of −100 to −120 a token: a chunk's total decay is e^−800,
    whose inverse overflows float64, so never form exp(±cumulative log gate) on its own: GLA's factorised scores,
    (Q ⊙ e^b)(K ⊙ e^−b)ᵀ with b the cumulative log gate, are exact on paper but overflow). The checks record the
    largest tensor you build: one as large as a whole (N × N) matrix per head fails. They also count the torch
    operations you run on N = 128 tokens with chunks of 8 and of 32: the count must fall with the chunk size (about
    N/C steps, each a few batched operations), so a loop over the tokens fails, even with the right values.

    Hint 1 (nudge): with a scalar decay the weight of key j for query i is (q_i · k_j) γ^(i−j). With a gate per
        feature the decay sits inside the dot product: it weighs each feature's term separately.
    Hint 2 (plan): loop over the chunks (the last may be shorter). In a chunk, cumulative sums of the log gates
        from the chunk's start give b, (c, Dk) per head; the intra-chunk weights are a (c, c) matrix per head,
        zero above the diagonal, each entry a sum over the Dk features; the carried state is read with the query
        decayed from the chunk's start; the state is then decayed through the whole chunk and each key of the
        chunk is written decayed from its own position to the chunk's end. Take every exponent as a difference
        of cumulative sums that is <= 0, masking the entries above the diagonal before the exponential.
    Hint 3 (formula): in words, per chunk. Output: the carried state read by the query whose every feature is
        decayed from the chunk's start to its own token, plus each value of the chunk up to its own token weighted by
        a feature-by-feature sum of query times key times the decay between the two tokens; divide by √Dk. State
        handed on: the old state with each key-feature row decayed through the whole chunk, plus each key of the
        chunk, feature by feature decayed from its token to the chunk's end, times its value.
    """
    raise NotImplementedError("Task 9.2")


def repeated_write_error(initial_state, k, v, beta, log_alpha, t):
    """Task 9.3: the gated delta rule's readout error after writing the same pair t times.

    initial_state: (B, H, Dk, Dv), k: (B, H, Dk), v: (B, H, Dv), beta: (B, H), log_alpha: (B, H) <= 0,
    t: an int >= 0  ->  (B, H, Dv)
    Write the pair (k, v) t times with the gated delta rule, S ← α (I − β k kᵀ) S + β k vᵀ with α = exp(log_alpha)
    (minilin.gated.step's form: the decay multiplies the old state, not the write), starting from initial_state,
    and return the error v − Sᵀ k that remains. Find the closed form: no loop over the t writes.
    Extends notebook 09, section 1 ("Repeated writes to one key"), which runs the writes without a gate (α = 1),
    for a unit key and β <= 1: here a decay acts before every write, the key has any length and β may exceed 1.
    Checked against the loop for t = 0, 1, 3, 8 with β from 0 to 1.9 (minilin's layers keep β|k|² <= 1, or 2 with
    allow_neg_eigval=True; the algebra does not need it) and α from e^-2 to 1, for keys that are not unit length,
    for α = 1 with β = 0 (nothing changes), and for t = 10^6, where the error must have settled
    (no NaN or inf on the way).

    Hint 1 (nudge): write down what one write does to the readout Sᵀk itself, not to the state.
    Hint 2 (plan): with c = |k|², express the readout after one write through the readout before it: it is a
        number times the old readout plus a fixed vector. Turn that into a step for the error, unroll t steps
        into one power and one geometric sum, and look at the case where the number is exactly 1.
    Hint 3 (formula): in words, track the error e_t = v − S_tᵀk: one write takes it to a number ρ times e_t
        plus a vector that is the same at every write. When |ρ| < 1, find the fixed point of one write.
        Check the two ends you know: α = 1 gives the notebook's error, and β|k|² = 1 clears the error in one
        write whatever α is.
    """
    raise NotImplementedError("Task 9.3")


def memory_crossover(layers, exact_layers, heads, dim_head, dim_k, dim_v, kv_itemsize, state_itemsize):
    """Task 9.4 (optional, a short warm-up): the context length at which exact attention's decoding memory first exceeds a hybrid model's.

    All ints  ->  a Python int n >= 1, or None
    Two models of `layers` layers with `heads` heads each. Exact attention keeps a KV cache: for every layer,
    head and past token a key and a value of dim_head numbers of kv_itemsize bytes. The hybrid keeps exact
    attention in `exact_layers` of its layers (the same KV cache there) and a recurrent layer in the others: per
    head one dim_k × dim_v state of state_itemsize bytes a number, whatever the context (minilin.gated.state_bytes
    counts it that way; states are often kept in float32 while the cache is bfloat16). Return the smallest
    context length n at which the exact model keeps strictly more bytes than the hybrid; None when the hybrid has
    no recurrent layer; raise ValueError when exact_layers is not between 0 and layers.
    Extends Task 7.9 and notebook 09, section 4 (state bytes against the KV cache as the context grows), which compares a
    fully recurrent model with exact attention. Checked on seven models (bfloat16, float32 and float64 caches,
    dim_k != dim_v, some crossovers landing on a whole number), by the bytes at n and at n − 1.

    Hint 1 (nudge): write both totals for a context n and subtract. What is left of the exact layers the two
        models share?
    Hint 2 (plan): the shared exact layers cancel, and so does the number of recurrent layers and of heads:
        compare one recurrent layer's one head with the KV cache that head would keep in exact attention. Then
        find the first whole n that is strictly past the point where the two are equal. (For notebook 09's
        section 4, whose two layers have different head counts, fold the head counts into the sizes first.)
    Hint 3 (formula): per recurrent layer and head, write the exact model's extra bytes at context n as
        (what a cache of n tokens takes) minus (what the state takes). Solve for the n at which they are
        equal; the answer is the first whole n strictly beyond it, which is not the same as rounding up when
        the two are equal at a whole number.
    """
    raise NotImplementedError("Task 9.4")


def chunked_gated_retention(q, k, v, log_alpha, chunk_size, initial_state=None):
    """Task 9.5 (core): retention with a data-dependent scalar gate per token and head, in chunks.

    q, k: (B, H, N, Dk), v: (B, H, N, Dv), log_alpha: (B, H, N) <= 0, chunk_size: a positive int (it need not
    divide N, and may exceed it), initial_state: (B, H, Dk, Dv) or None (zeros)
    ->  (o (B, H, N, Dv), final state (B, H, Dk, Dv))
    The recurrence is S_t = α_t S_{t-1} + k_t v_tᵀ, α_t = exp(log_alpha_t), o_t = S_tᵀ q_t, with no 1/√Dk (as
    notebook 09's chunked_retention; minilin.gated.recurrent_reference(q, k, v, log_decay=log_alpha, scale=1.0)).
    The gate is the one Mamba-2 (Dao and Gu 2024, arXiv 2405.21060) and Gated DeltaNet use: one number per head,
    but chosen by each token.
    Extends notebook 09, section 2 ("Why chunks"), whose chunked_retention has one constant decay γ per head and
    whole chunks only: here every token brings its own decay, the last chunk may be shorter, and a state may be
    handed in. Checked against the token-by-token definition for chunk sizes 1, 3, 4, 10 and 16 with N = 10, with
    an initial state, Dk != Dv and a ragged last chunk, with gates wide open (log_alpha = 0), with gates that
    close hard in one head (log gates of −45 to −55 a token over chunks of 16: a chunk's total decay is about
    e^−800, whose inverse overflows float64, so never form exp(−cumulative log gate) on its own), and for
    causality (changing tokens 7 and later leaves the outputs before token 7 as they were). The checks record
    the largest tensor you build (a whole (N × N) matrix per head fails) and count the torch operations on
    N = 128 tokens with chunks of 8 and of 32: the count must fall with the chunk size, so a loop over the
    tokens fails, even with the right values.

    Hint 1 (nudge): with a constant γ, the decay between token j and a later token i is γ^(i−j): the product of
        the i − j decays in between. When each token has its own gate, it is still the product of the gates in
        between, only no longer a power; in logarithms, a product of gates is a sum.
    Hint 2 (plan): loop over the chunks (the last may be shorter). In a chunk, the running sum of the chunk's
        log gates from its start gives b, one number per token and head, (c,) per head. Then the notebook's
        three pieces, each with its factor read off b: what the incoming state gives token i (decayed from the
        chunk's start to i), what the chunk's own keys give it (a masked (c × c) weight matrix times the values),
        and the state handed on (the old state decayed through the whole chunk plus each key, decayed from its
        token to the chunk's end, times its value).
    Hint 3 (formula): in words: every decay factor in the three pieces is the exponential of a difference of
        the cumulative log-gates, the later position's minus the earlier one's (the chunk's start counts as 0, so
        the sum at token i includes its own gate, as γ^(i+1) did). Set the masked entries to minus infinity
        before taking the exponential, never after.
    """
    raise NotImplementedError("Task 9.5")
