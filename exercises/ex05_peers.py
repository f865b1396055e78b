"""Exercises for notebook 05, whose idea is to know what a peer library really computes and to test that two
implementations agree: write what LAT computes (5.1, a warm-up, and 5.2), move weights between a library and ours
(5.3, and 5.4 as a warm-up), extend section 1's linear attention (5.6), and predict where LAT's causal clamp starts to
act and measure it on LAT (5.8: predict, then measure), and catch a layer whose future leaks into its past (5.10).
Tasks 5.3 and 5.10 are the core; 5.1, 5.2, 5.4, 5.6 and 5.8 are optional.

Implement each function, then grade yourself:  python -m minilin grade --chapter 5
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv);
mask (B, M) bool with True = real token (a key padding mask).
Do not call minilin.efficient, minilin.linear, minilin.peers or the peer libraries here: the grader rejects such calls
(read them once you are done).

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import torch


def efficient_attention(q, k, v, mask=None):
    """Task 5.1 (optional, a warm-up): Shen et al.'s efficient attention ρ_q(q) (ρ_k(k)ᵀ v), non-causal (arXiv
    1812.01243, eq. 3).

    Notebook 05, section 2, writes the unmasked kernel; this task adds a padding mask and an all-padded sequence.
    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), mask: (B, M) bool or None  ->  (B, H, N, Dv)
    ρ_q: softmax of each query over its D features (dim -1).
    ρ_k: softmax of each key feature over the M positions (dim -2); padded keys must get weight 0, and a
         sequence with no real key at all must give zeros (not NaN). torch.softmax is already stable (it
         subtracts the maximum first); a hand-written exp(k) is not, and keys times 500 make it overflow.
    The checks use several shapes (N != M, two head dimensions), a padded case with an all-padded sequence, keys
    times 500, and record every matrix product you form: an (N, M) one fails.

    Hint 1 (nudge): the two softmaxes run over different axes. How does a softmax give a padded key a weight of
        exactly 0, and what does torch.softmax return for a column in which every entry is -inf?
    Hint 2 (plan): turn mask (B, M) into (B, 1, M, 1) and hide the padded keys; ρ_k over dim -2 is (B, H, M, D),
        then repaired for the sequences with no real key; the "context" ρ_kᵀ v is (B, H, D, Dv), one per head;
        ρ_q over dim -1 is (B, H, N, D); ρ_q times the context gives (B, H, N, Dv). Multiply in that order.
    Hint 3 (formula): give the padded keys a score of minus infinity before the softmax over positions, so that
        their weight is exactly 0; in a sequence with no real key every weight is then 0 divided by 0, NaN, and
        must be set to 0 so that its outputs are zeros. The output is ρ_q times the per-head (D × Dv) context.
    """
    raise NotImplementedError("Task 5.1")


def causal_efficient_attention(q, k, v):
    """Task 5.2 (optional): LAT's causal kernel as minilin idealises it (no clamp, any N), by prefix sums.

    Extends notebook 05, section 2, "The causal variant" (which runs the package), with section 1's prefix sums.
    q, k, v: (B, H, N, D), (B, H, N, D), (B, H, N, Dv)  ->  (B, H, N, Dv);  no mask; N == M.
    Features φ_q = softmax(q) over features, φ_k = exp(k). Query i sees the keys j <= i (LAT's default,
    blindspot_size=1):
    out_i = Σ_{j<=i} (φ_q(q_i)·φ_k(k_j)) v_j / Σ_{j<=i} φ_q(q_i)·φ_k(k_j)
    Use prefix sums (torch.cumsum), not an (N, N) matrix: the checks record every matrix product you form, and
    an (N, N) one fails. They also use two head dimensions and lengths, and probe that no output sees the future.
    The checks use unit-scale keys in float64, at which a raw exp(k) neither overflows nor underflows; keys far
    from 0, or float16, need a running maximum (notebook 05, pitfall 2 and its Try it yourself; minilin has one).

    Hint 1 (nudge): the numerator and the denominator both sum over a *prefix* of the keys. What do query i's
        two sums share with query i + 1's, and what in them belongs to query i alone?
    Hint 2 (plan): φ_q and φ_k are (B, H, N, D). Prefix sums over positions of φ_k(k_j) v_jᵀ give
        (B, H, N, D, Dv) and of φ_k(k_j) give (B, H, N, D); at each position contract them with that query's φ_q
        over D, to a numerator (B, H, N, Dv) and a denominator (B, H, N), and divide.
    Hint 3 (formula): with running sums S_i of φ_k(k_j) v_jᵀ and z_i of φ_k(k_j) over j ≤ i, out_i is
        φ_q(q_i)ᵀ S_i divided by φ_q(q_i)ᵀ z_i. Every query sees at least its own key, so no denominator is 0.
    """
    raise NotImplementedError("Task 5.2")


def transplant_into_lat(ours, lat, causal=False):
    """Task 5.3 (core): copy our EfficientSelfAttention's weights into a linear-attention-transformer SelfAttention.

    Uses notebook 05, section 2 (LAT's non-causal `linear_attn` is ours times one constant c; its causal kernel is
    "The causal variant") and section 3 (a weight transplant is tested by comparing outputs). Read LAT's source.
    ours: minilin.efficient.EfficientSelfAttention(dim, heads, dim_head=D) (no q/k/v bias)
    lat:  linear_attention_transformer.linear_attention_transformer.SelfAttention(dim, heads, causal=causal,
          dim_head=D), same sizes, random weights.  Returns lat, modified in place, such that
          lat(x) == ours(x, causal=causal) for every x (B, N, dim), with and without a padding mask.
    The grader builds both kinds, non-causal and causal, each at two head dimensions, one of them not dim / heads.
    minilin.peers.lat_self_attention_from_ours holds a solution: read it once you are done.

    Hint 1 (nudge): LAT's two kernels both multiply by the same kind of constant. Compare what that constant
        does to the output in each: does it survive to the output in both?
    Hint 2 (plan): read LAT's `linear_attn` and `causal_linear_attn`; for each, write the output as a fraction
        and find the constant in the layer's sizes and where it ends up; copy every weight, rescale where the
        output needs it, and compare outputs for both kinds, at both head sizes, with and without a mask.
    Hint 3 (formula): the non-causal kernel multiplies ρ_q by c (set by the head size) after both softmaxes, so
        c sits in the numerator only and the output is c times ours; the causal kernel scales the queries by the
        same c and then divides by a normaliser built from those scaled queries, so c sits in both numerator and
        denominator and cancels (as long as LAT's 1e-3 clamp on that denominator does not act).
    """
    raise NotImplementedError("Task 5.3")


def linformer_into_ours(theirs, ours):
    """Task 5.4 (optional, a short warm-up): copy a `linformer` 0.2.3 LinformerSelfAttention's weights into our
    LinformerSelfAttention.

    Practice for section 3's weight transplant: notebook 03's appendix prints `linformer_to_peer`, this adapter in
    the reverse direction (ours into theirs). Write this one without looking at it, then compare.
    theirs: linformer.LinformerSelfAttention(dim, seq_len, k, heads) (share_kv=False, one_kv_head=False)
    ours:   minilin.linformer.LinformerSelfAttention(dim, heads, seq_len, k, sharing="headwise")
    Returns ours, modified in place, such that ours(x) == theirs(x) for x (B, N, dim), N <= seq_len.
    Their proj_k, proj_v are (seq_len, k) and project with einsum('bnd,nk->bkd'); our E, F are (k, seq_len)
    and project with E @ keys. Their to_q, to_k, to_v, to_out map to ours by name. The checks use two sizes
    of (dim, heads, seq_len, k), each at its full length and a shorter one.

    Hint 1 (nudge): write both projections as a sum over the positions n: slot j gets Σ_n (their matrix)[n, j]
        · key_n, and Σ_n E[j, n] · key_n. How must E relate to their proj_k for these to be equal?
    Hint 2 (plan): without recording gradients, copy the four Linear layers by name (weights, and to_out's bias
        too); E gets proj_k rearranged to (k, seq_len), F gets proj_v the same way; return ours. Shorter inputs
        need no extra work: both sides then use the first N positions of their matrices.
    Hint 3 (formula): their projection sends key n to slot j with coefficient proj_k[n, j]; ours with E[j, n].
        Equal for every n and j fixes E from proj_k (and F from proj_v) up to a rearrangement you work out;
        the linear layers need no change.
    """
    raise NotImplementedError("Task 5.4")


def chunked_causal_linear_attention(q, k, v, chunk_size, mask=None):
    """Task 5.6 (optional, extend): causal elu+1 linear attention computed chunk by chunk, with a key
    padding mask.

    Extends notebook 05, section 1, and notebook 04, section 6 (prefix sums; the chunked form in words); no cell
    writes it. Here you combine the two forms, as `minilin.linear` does,
    and add padding.
    q, k: (B, H, N, D), v: (B, H, N, Dv), chunk_size: int >= 1, mask: (B, N) bool or None  ->  (B, H, N, Dv)
    φ(x) = elu(x) + 1 (torch.nn.functional.elu). Query i sees the real keys j <= i:
    out_i = Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j); a query that sees no real key outputs 0.
    Inside a chunk of chunk_size positions use the (C × C) form; across chunks carry S (D × Dv) and z (D,).
    The last chunk may be shorter, and chunk_size may exceed N. The checks use five chunk sizes, two shapes,
    right, left and scattered padding, a future-leak probe, and record every matrix product: an (N × N) one
    fails (with chunks of 4 and N = 24).

    Hint 1 (nudge): split the keys query i sees into two groups: those in earlier chunks, already summed into
        S and z, and those in its own chunk at positions up to its own. What must a padded key contribute to
        either group?
    Hint 2 (plan): features φ(q), φ(k), with φ(k) set to 0 at padded positions; S = 0 (B, H, D, Dv), z = 0
        (B, H, D); for each chunk: the chunk's (C × C) feature products kept on and below the diagonal, a
        numerator from S plus the in-chunk products times the chunk's values, a denominator from z plus the
        in-chunk row sums, the ratio (0 where the denominator is 0), then add the chunk's keys into S and z.
    Hint 3 (formula): for query i in chunk c, numerator and denominator each have two terms: φ(q_i) against the
        state carried into chunk c, plus the in-chunk keys j ≤ i weighted by φ(q_i)·φ(k_j) (a padded key
        weighted 0). After the chunk, the state grows by that chunk's real keys only.
    """
    raise NotImplementedError("Task 5.6")


def clamp_onset(q, k, bucket_size=1):
    """Task 5.8 (optional; predict, then measure): below which shift of the keys does LAT's clamp
    change its causal output?

    Pitfall 2 shifted every key by −12 and saw LAT's causal_linear_attn shrink its outputs; here you predict, for
    any inputs, the shift at which that starts. Notebook 05's causal variant (section 2; optional Task 5.2 writes
    it) is the idealised kernel, which a common shift s of every key (k + s) leaves unchanged. LAT's causal_linear_attn(q, k + s, v, bucket_size=bucket_size) computes
    the same ratio but divides by max(denominator, 1e-3); read its source: which denominator does it clamp, and
    is it the formula's?
    q, k: (B, H, N, D) float64, bucket_size: 1, or B > 1 dividing N with N >= 2·B: LAT's buckets (notebook 05,
    Appendix A), in which query i sees only the keys j < (i // B) * B, and a query in the first bucket none
    ->  a Python float s*: for every s > s* LAT's output equals the idealised kernel's (up to overflow of e^{k+s}),
    for every s < s* some output departs from it. s* depends on the inputs; it may be positive (the clamp already
    acts at s = 0).
    Predict first, and write it down: which query meets the clamp first, and how does s* move when D grows
    from 4 to 64 with the denominators held fixed? Then measure: outside this file (a notebook cell of your own),
    run LAT at s* + 0.01 and s* − 0.01 and at a few shifts between, and find the onset by bisection; your
    prediction should agree to 1e-6.
    The checks measure the onset on LAT itself for four inputs: D = 4 to 64, bucket sizes 1, 2 and 4, a case
    whose smallest denominator is not at the first position, and keys low enough that the clamp already acts.

    Hint 1 (nudge): a shift s multiplies every e^{k_j}, and so every query's numerator and denominator, by the
        same factor. The ratio does not see it; what does the clamp see? Look for a factor LAT applies to the
        queries that cancels in the ratio but not in the comparison with 1e-3.
    Hint 2 (plan): form each query's denominator as in section 2's formula, without LAT's factor: prefix sums of exp(k),
        read at the query's last visible key, contracted with softmax(q) over D, keeping only the queries that
        see a key; this gives (B, H, N) or fewer positions; take the smallest over
        batch, heads and positions; write the clamp's condition for that query at shift s, with LAT's factor,
        and solve it for s with a logarithm.
    Hint 3 (formula): the shift multiplies that query's clamped denominator by e to the s; take logs of the clamp
        condition and solve for s, checking where LAT's factor enters it.
    """
    raise NotImplementedError("Task 5.8")


def past_changes(layer, x):
    """Task 5.10: pitfall 3's test on a layer you did not write: for each split t0, how far can a change of the
    future move the past?

    Uses notebook 05, pitfall 3: a causal layer's outputs before t0 do not move, by any amount, when only the
    inputs from t0 on change; a gradient probe can miss a leak (a detached statistic of all positions).
    layer: a callable, x (B, N, dim) -> (B, N, dim), that claims to be causal; treat it as a closed box.
    x: (B, N, dim) float64  ->  a float tensor of shape (N,): entry t0 is the largest |change| of any output at a
    position < t0 over changes you choose of the inputs at positions >= t0 (entry 0 is 0: nothing comes before).
    A causal layer reads <= 1e-12 everywhere. Choose the changes yourself: they must leave every input before t0
    exactly as it was, and be able to move whatever the layer might compute from the future.
    The checks use hidden layers built anew, with new weights and inputs, on every run: one causal, one whose
    future leaks through a detached maximum over all positions (as in performer-pytorch), one that leaks inside
    blocks of positions. Where the grader's own change moves the past by more than 1e-6 your reading must exceed
    1e-9; where the layer is causal at t0 it must be <= 1e-12. One redraw at one split, like pitfall 3's cell, misses
    some leaks: a layer that leaks only inside blocks of positions moves the past at some splits and not at others,
    so test every split. Then use it on pitfall 3's layers: which split, if any, leaks?

    Hint 1 (nudge): a causal layer gives the same outputs before t0 for *every* future, so one change that moves
        them is proof of a leak, but one that does not is no proof of causality. What kind of future change must
        move a maximum taken over all positions?
    Hint 2 (plan): run the layer once on x, without recording gradients. For each t0 from 1 to N - 1, build
        changed inputs equal to x before t0 and different from t0 on, run the layer on each, and keep the
        largest |difference| of the outputs at positions before t0.
    Hint 3 (formula): reading(t0) = max over your changes of max |layer(x')[:, s] - layer(x)[:, s]| over s < t0,
        where x' equals x at every position < t0. A detached maximum over all positions shows only if your change
        can raise it above the maximum the past already saw; a random redraw at the same scale may leave it where
        it was, and then the past does not move.
    """
    raise NotImplementedError("Task 5.10")
