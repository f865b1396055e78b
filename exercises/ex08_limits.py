"""Exercises for notebook 08: where low rank fails.

Implement each function, then grade yourself:  python -m minilin grade --chapter 8
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); attention maps P (B, H, N, M).
Linformer's projections E, F are (k, seq_len) shared by the heads or (H, k, seq_len) one per head, seq_len >= M.
Only minilin.attention.softmax_attention may be called here (not minilin.lowrank, nor minilin.linformer).

Tasks 8.2 and 8.4 are optional previews of notebook 09: they build by hand the fixed-size state of linear attention.
Tasks 8.2 and 8.3 are extend tasks (the grader's mark): no notebook cell solves them.

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch

from minilin.attention import softmax_attention  # allowed here (Task 8.3 may build its copy with it)


def linformer_effective_map(q, k, E, F, mask=None):
    """Task 8.1: the (B, H, N, M) map a Linformer layer applies to its M values, padding included.

    q: (B, H, N, D), k: (B, H, M, D), E, F: (k, seq_len) or (H, k, seq_len) with seq_len >= M, mask: (B, M) bool
    (True = real token) or None  ->  (B, H, N, M)
    Return, for every batch and head, the matrix P with P @ v equal to minilin.linformer.linformer_attention(q, k, v,
    E, F, mask=mask) for any values v: the weights each query puts on the M input positions; its rank is at most k.
    The layer's rules: a sequence of M positions uses the first M columns of E and F; a padded position gives
    nothing to any slot (neither its key nor its value) and so receives nothing; a slot that a short sequence or
    padding leaves with no real position in its E and F rows (as pooling or selection rows can) holds no token and
    gets no weight; a query with no slot left gets zeros, never NaN.
    Core: the first check (E, F shared by the heads, M = seq_len, no mask; notebook 08, section 3's map) and the
    rank check (your map times v is the layer's output, rank at most k). The other checks, each scored on its own,
    test minilin's conventions: per-head E, F, M < seq_len and padding as in Task 3.2, then empty slots.

    Hint 1 (nudge): the layer's output is linear in v, so the map is what multiplies v. Over what does the layer's
        softmax run, the M positions or the k slots, and what carries a slot's weight back to the positions?
    Hint 2 (plan): core first: the (B, H, N, k) weights over the slots, then what turns k into M. Then
        settle the edge cases one at a time: which columns a shorter sequence uses; what a padded position may give
        a slot and receive back; which slots of each (batch, head) hold a real position, and how to keep the
        others out of the softmax without a NaN where none is left; how a head axis on E or F changes the products.
    Hint 3 (formula): a query's weights are the softmax of its scaled scores against the projected keys, taken
        over the slots that hold a real position only (an empty row stays zero); each slot hands its weight to the
        positions through its row of F, whose padded columns are zero; a padded key adds nothing to any projected
        key.
    """
    raise NotImplementedError("Task 8.1")


def state_readout(k, v, q):
    """Task 8.2 (optional; first function): store p key-value pairs in one fixed-size state and read it with queries.

    k: (B, H, p, D) keys, v: (B, H, p, Dv) values, q: (B, H, Q, D) queries  ->  (B, H, Q, Dv)
    Linear attention without its normaliser keeps one (D, Dv) state per head, S = Σ_i k_i v_iᵀ, whatever p is;
    a query q reads out q S. Return the readout of every query.
    Extends notebook 08's question (how much can a map of bounded size hold?) from a Linformer's k slots to a
    linear-attention state built by hand.

    Hint 1 (nudge): the state does not grow with p: it is a sum of outer products, one per pair.
    Hint 2 (plan): build the state of every (batch, head) at once from the keys and the values, then multiply
        the queries by it. Nowhere do you need a (Q, p) matrix of scores, though the result is the same.
    Hint 3 (formula): the state is the sum, over the pairs, of each key's outer product with its value; a query's
        readout is the query times the state, which is also every value weighted by its key's dot product with the
        query.
    """
    raise NotImplementedError("Task 8.2")


def recall_accuracy(k, v):
    """Task 8.2 (optional; second function): the fraction of the p pairs that the state gives back.

    k: (B, H, p, D), v: (B, H, p, Dv)  ->  (B, H) floating tensor, each entry in [0, 1]
    Query the state S = Σ_i k_i v_iᵀ with each stored key k_i; the pair is recalled when the stored value
    nearest (Euclidean distance) to the readout k_i S is v_i itself. Return the recalled fraction per head.
    With orthonormal keys and p <= D every pair comes back exactly; past p = D the keys cannot be orthogonal,
    the crosstalk Σ_{j≠i} (k_i · k_j) v_j grows, and the accuracy falls.
    Extends notebook 08's question to a linear-attention state, as state_readout does.

    Hint 1 (nudge): read the state with the keys themselves, then compare each readout with every stored value.
    Hint 2 (plan): the readouts (B, H, p, Dv); the distances from each readout to each value (B, H, p, p); the
        index of the nearest value for each readout; how often it is the readout's own index.
    Hint 3 (formula): pair i counts as recalled when, of all p stored values, the nearest to its readout is
        value i; the accuracy is the share of the p pairs recalled.
    """
    raise NotImplementedError("Task 8.2")


def copy_sharpness(v, positions, tol):
    """Task 8.3: how sharp must a copying Linformer's scores be?

    v: (B, H, M, Dv), positions: a list of `slots` distinct ints in 0..M-1, tol: a float > 0  ->  a Python float
    A Linformer copies chosen positions when E = F select them (row j of E holds a 1 at position positions[j]) and
    query j's scaled scores are s on projected slot j and 0 on every other projected slot: its output
    softmax(scores) (F v) tends to v[..., positions, :] as s grows, but a softmax never reaches it. Return the
    smallest s >= 0 at which every entry of that output is within `tol` of v[..., positions, :] (to 1e-6 in s; 0.0
    when s = 0 already meets it). Predict first: for 16 slots and tol 1e-3, is s nearer 5, 10 or 50, and how does
    it grow with the number of slots?
    Extends notebook 08's appendix on a copying Linformer, whose queries do not fully single out their slot unaided: how
    large must the gap between the own score and the others be, for a copy to a given precision?

    Hint 1 (nudge): nothing here needs training. At sharpness s every row puts one weight on its own slot and
        another, equal, weight on each other slot. How does that weight fall with s, and what does a row's error
        multiply it by?
    Hint 2 (plan): write row j's output as the value at positions[j] plus the weight on one other slot times a
        sum of differences of chosen values; take the largest error over batch, head, row and feature; the error
        only falls as s grows, so solve for s, or bisect on it.
    Hint 3 (formula): each other slot gets weight one over (e to the s, plus slots minus one), and the weights of
        a row sum to one. Write row j's error with that weight and the chosen values, set the largest error equal
        to tol and solve for s yourself; then check the case where s = 0 already meets tol.
    """
    raise NotImplementedError("Task 8.3")


def pairs_held(k, v, threshold=0.9):
    """Task 8.4 (optional; predict, then measure): how many pairs does a state of dimension D hold?

    k: (P, D) keys, v: (P, Dv) values (one head, no batch), threshold: a float in (0, 1]  ->  a Python int
    Store the first p pairs in one state S_p = Σ_{i<p} k_i v_iᵀ (Task 8.2's state, without batch and heads) and
    read it with each of those p keys; a pair is recalled when the stored value nearest (Euclidean) to its readout
    is its own. Return the largest p such that every prefix 1, 2, ..., p recalls at least `threshold` of its
    pairs (0 when even p = 1 falls short).
    Measures how many pairs a fixed-size state gives back, on a state built by hand. Before you run it, predict: for random unit keys of dimension D = 16 and Gaussian values of
    dimension 16, at threshold 0.9, is the answer below D, about D, or well above it? Then measure it on 50 draws
    (for s in range(50): g = torch.Generator().manual_seed(s); keys torch.nn.functional.normalize(torch.randn(64,
    16, generator=g, dtype=torch.float64), dim=-1), values torch.randn(64, 16, generator=g, dtype=torch.float64))
    and report the median and the range: one draw alone says little.

    Hint 1 (nudge): grow the number of pairs one at a time, and stop at the first prefix that falls short.
    Hint 2 (plan): for p = 1, 2, ...: build the state from the first p keys and values, read it with those keys,
        find each readout's nearest stored value among the first p, and compare the recalled share with the
        threshold; keep the last p that passed.
    Hint 3 (formula): the answer is the last prefix length before the first prefix whose recalled share falls
        below the threshold; each prefix has its own state, built from its pairs only, and searches its own
        values only.
    """
    raise NotImplementedError("Task 8.4")
