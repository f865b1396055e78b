"""Exercises for notebook 09: decay, gates and the delta rule.

Implement each function, then grade yourself:  python -m minilin grade --chapter 9
Shapes follow the course convention: q, k (B, H, N, Dk), v (B, H, N, Dv); the state S is (B, H, Dk, Dv), one
Dk × Dv matrix per head, and a query reads it as o_t = S_tᵀ q_t / √Dk. Gates come as logarithms (log_alpha,
log_gate <= 0): the state is multiplied by exp(·), a number in (0, 1].
Do not call minilin here (minilin.gated is the reference the grader compares with; read it once you are done).

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import math

import torch


def gated_delta_loop(q, k, v, beta, log_alpha, initial_state=None):
    """Task 9.1: the gated delta rule (Gated DeltaNet, arXiv 2412.06464, eq. 10), one token at a time.

    q, k: (B, H, N, Dk), v: (B, H, N, Dv), beta: (B, H, N), log_alpha: (B, H, N) <= 0,
    initial_state: (B, H, Dk, Dv) or None (zeros)  ->  (o (B, H, N, Dv), final state (B, H, Dk, Dv))
    Token t first forgets, then writes the error of what the forgotten state predicts:
        S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,  α_t = exp(log_alpha_t),  o_t = S_tᵀ q_t / √Dk.
    Revisits notebook 09, section 1 ("The recurrence": retention, GLA, the delta rule and the gated delta rule as
    token loops), from a given initial state and with Dk != Dv. Checked against the token-by-token definition
    on three shapes (one of a single token), with α = 1 (the plain delta rule), with β = 0 (nothing written: the
    initial state only fades) and with keys that are not unit length.

    Hint 1 (nudge): expand the product. Which state does the error v_t − (prediction) use: the one before the
        gate or the one after it?
    Hint 2 (plan): a Python loop over the N tokens; in it, scale the state by α_t (one number per batch row and
        head), read the scaled state at k_t to get a (B, H, Dv) prediction, write β_t k_t times the error as an
        outer product, then read the new state with the scaled query. Stack the N outputs along dim 2 and return
        them with the last state.
    Hint 3 (formula): S' = α_t S_{t-1}; e_t = v_t − S'ᵀ k_t; S_t = S' + β_t k_t e_tᵀ (an outer product, Dk × Dv);
        o_t = S_tᵀ q_t / √Dk. This equals α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ.
    """
    raise NotImplementedError("Task 9.1")


def chunked_gla(q, k, v, log_gate, chunk_size, initial_state=None):
    """Task 9.2: gated linear attention (GLA, arXiv 2312.06635, eq. 3) in chunks, with a gate per key feature.

    q, k: (B, H, N, Dk), v: (B, H, N, Dv), log_gate: (B, H, N, Dk) <= 0, chunk_size: a positive int (it need not
    divide N, and may exceed it), initial_state: (B, H, Dk, Dv) or None (zeros)
    ->  (o (B, H, N, Dv), final state (B, H, Dk, Dv))
    The recurrence is S_t = diag(exp g_t) S_{t-1} + k_t v_tᵀ, o_t = S_tᵀ q_t / √Dk: each row d of the state (key
    feature d) has its own gate. Compute it chunk by chunk: inside a chunk a masked (c × c) matrix and a product
    with the chunk's values, plus what the carried state contributes; between chunks, one update of the state.
    Extends notebook 09, section 2 ("Why chunks"), which derives the chunked form for one scalar decay per head
    (retention) only: here the decay between tokens j and i differs from feature to feature, so it can no longer
    be pulled out of the product q_i · k_j. Checked against the token-by-token definition for chunk sizes 1, 3,
    4, 10 and 16 with N = 10, with an initial state and Dk != Dv, with gates wide open (log_gate = 0), and with
    gates that close almost completely (log gates of −100 to −120 a token: a chunk's total decay is e^−800,
    whose inverse overflows float64, so never form exp(+cumulative log gate) on its own). The checks record the
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
    Hint 3 (formula): with b_i = Σ_{s ≤ i} g_s inside the chunk (a vector over the features) and S_0 the state at
        the chunk's start: o_i = [ Σ_d q_id exp(b_id) S_0[d, :] + Σ_{j ≤ i} (Σ_d q_id k_jd exp(b_id − b_jd)) v_j ]
        / √Dk, and the next chunk starts from S_C[d, :] = exp(b_Cd) S_0[d, :] + Σ_j exp(b_Cd − b_jd) k_jd v_j,
        where C is the chunk's last token.
    """
    raise NotImplementedError("Task 9.2")


def repeated_write_error(initial_state, k, v, beta, t):
    """Task 9.3 (first function): the delta rule's readout error after writing the same pair t times.

    initial_state: (B, H, Dk, Dv), k: (B, H, Dk), v: (B, H, Dv), beta: (B, H), t: an int >= 0  ->  (B, H, Dv)
    Write the pair (k, v) t times with the delta rule S ← S + β k (v − Sᵀ k)ᵀ, starting from initial_state, and
    return the error v − Sᵀ k that remains. Find the closed form: no loop over the t writes.
    Extends notebook 09, section 1 ("Repeated writes to one key"), which runs the writes for a unit key and β <= 1:
    here the key has any length, β may exceed 1, and the answer is a formula, not a loop. Checked against the loop for t = 0, 1, 3, 8 with β from 0 to 1.9 (minilin's layers keep β <= 1; the
    algebra does not need it), for keys that are not unit length, and for β = 1 with a unit key (zero after one
    write).

    Hint 1 (nudge): write down what one write does to the error itself, not to the state.
    Hint 2 (plan): the error before any write is v − S_0ᵀ k, per (batch, head); each write multiplies it by one
        number that depends only on β and the key's squared length; apply that number t times at once.
    Hint 3 (formula): e_0 = v − S_0ᵀ k and e_{t} = (1 − β ‖k‖²) e_{t−1}, so e_t = (1 − β ‖k‖²)^t e_0.
    """
    raise NotImplementedError("Task 9.3")


def writes_needed(beta, eps, key_norm=1.0):
    """Task 9.3 (second function): how many writes of one key shrink its readout error to a fraction eps.

    beta: a float, eps: a float > 0, key_norm: ‖k‖ (a float > 0)  ->  a Python int, or None
    Return the smallest t >= 0 for which the error after t writes is at most eps times the error before the first
    write (whatever the initial state and the value), or None when no number of writes gets there.
    Extends notebook 09, section 1, as repeated_write_error does. Checked on β = 1 (one write suffices for a unit
    key), β in (0, 1) and in (1, 2), keys of length 1, 1.5 and 2, an eps met exactly (count it as reached),
    eps = 1 (no write needed), and on β = 0, β = 2 and a write that overshoots, where the answer is None; every
    count is replayed by the delta rule itself.

    Hint 1 (nudge): Task 9.3's closed form says by how much each write shrinks the error. When does that factor
        shrink anything at all, and when does one write remove the error completely?
    Hint 2 (plan): take the factor's absolute value r. Handle the special cases first (eps >= 1, r = 0, r >= 1);
        otherwise a logarithm gives the count, which you then check and correct by a step up or down, since the
        logarithms' round-off can land just on the wrong side of a whole number.
    Hint 3 (formula): r = |1 − β ‖k‖²|; the answer is the smallest whole t >= 0 with r^t <= eps, that is
        ⌈ln eps / ln r⌉ for 0 < r < 1 and eps < 1; 0 when eps >= 1; 1 when r = 0 (and eps < 1); None when r >= 1
        and eps < 1.
    """
    raise NotImplementedError("Task 9.3")


def memory_crossover(layers, exact_layers, heads, dim_head, dim_k, dim_v, kv_itemsize, state_itemsize):
    """Task 9.4: the context length at which exact attention's decoding memory first exceeds a hybrid model's.

    All ints  ->  a Python int n >= 1, or None
    Two models of `layers` layers with `heads` heads each. Exact attention keeps a KV cache: for every layer,
    head and past token a key and a value of dim_head numbers of kv_itemsize bytes. The hybrid keeps exact
    attention in `exact_layers` of its layers (the same KV cache there) and a recurrent layer in the others: per
    head one dim_k × dim_v state of state_itemsize bytes a number, whatever the context (minilin.gated.state_bytes
    counts it that way; states are often kept in float32 while the cache is bfloat16). Return the smallest
    context length n at which the exact model keeps strictly more bytes than the hybrid; None when the hybrid has
    no recurrent layer; raise ValueError when exact_layers is not between 0 and layers.
    Extends notebook 09, section 4 (state bytes against the KV cache as the context grows), which compares a
    fully recurrent model with exact attention. Checked on seven models (bfloat16, float32 and float64 caches,
    dim_k != dim_v, some crossovers landing on a whole number), by the bytes at n and at n − 1.

    Hint 1 (nudge): write both totals for a context n and subtract. What is left of the exact layers the two
        models share?
    Hint 2 (plan): the shared exact layers cancel, and so does the number of recurrent layers and of heads:
        compare one recurrent layer's one head with the KV cache that head would keep in exact attention. Then
        find the first whole n that is strictly past the point where the two are equal.
    Hint 3 (formula): exact − hybrid = (layers − exact_layers) · heads · (2 · n · dim_head · kv_itemsize −
        dim_k · dim_v · state_itemsize), positive exactly when n > dim_k · dim_v · state_itemsize / (2 · dim_head
        · kv_itemsize); the answer is the whole part of that ratio plus one.
    """
    raise NotImplementedError("Task 9.4")
