"""Exercises for notebook 04: Performer (FAVOR+) from scratch.

Implement each function, then grade yourself:  python -m minilin grade --chapter 4
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); a projection is an
(m, D) matrix whose rows are the random directions w_i. Do not call minilin.performer here.
Reference: "Rethinking Attention with Performers", Choromanski et al. 2020, arXiv 2009.14794.
Tasks 4.1-4.4 revisit the notebook; Tasks 4.5 and 4.6 are extend tasks: the chapter's idea on a new case;
Task 4.7 is the measure task: section 2's variance, measured on pairs the notebook did not use.
"""
import torch


def positive_random_features(x, projection):
    """Task 4.1: Lemma 1's positive random features.

    Revisits notebook 04, section 1.1.
    x: (..., N, D), projection W: (m, D) with rows w_i ~ N(0, I_D)  ->  (..., N, m)
    With these features φ(x)·φ(y) must be an unbiased estimate of exp(xᵀy). No D^(-1/4) scaling here and
    no stabilisation: the plain estimator. The grader compares with minilin's features for three shapes
    (two feature counts m, two dimensions D, a 2-D x) and checks unbiasedness on 20000 features (seed 5,
    within 4 standard errors).

    Hint 1 (nudge): complete the square: E_w[exp(wᵀs)] = exp(|s|²/2). Which factor, depending on x alone,
        turns E[exp(wᵀx) exp(wᵀy)] into exp(xᵀy)? And what makes an average of m terms out of a dot product?
    Hint 2 (plan): one matrix product gives every wᵢᵀx at once, shape (..., N, m); a per-row correction of
        shape (..., N, 1) broadcasts over the m features; exponentiate; divide by a constant.
    Hint 3 (formula): φ(x)_i = exp(wᵢᵀx − |x|²/2) / √m: the i-th projection of x minus half of x's squared
        norm (one value per row, broadcast over the m features).
    """
    raise NotImplementedError("Task 4.1")


def orthogonal_projection(nb_features, dim, generator):
    """Task 4.2: a block-orthogonal Gaussian projection (m, D), as in the paper's Theorem 2.

    Revisits notebook 04, section 3 (and Appendix I on the sign of QR's factors).
    Rows within a block of D rows are orthogonal, yet every row must still be marginally N(0, I_D) (so the
    estimator stays unbiased). Return float64, drawing every random number from `generator`. The grader checks,
    each on its own: the shape (m, D) and dtype for (10, 4) and (13, 5); that after normalising each row, rows
    0..D-1, D..2D-1, … (the last block possibly shorter) are orthonormal; that two blocks are not orthogonal to
    each other (independent draws); that two calls with generators seeded alike return the same matrix; on
    8000 rows of D = 4 (seed 8), that the fractions of rows with |w|² below 2, 4 and 8 are within 4 standard
    errors of the chi²(4) probabilities, and that rows of one block differ in length; on 8000 rows (seed 9),
    that every entry of a block is negative in 50% ± 4.5% of the 2000 blocks (uniform directions); and on 900
    rows of D = 3, that wᵀw/900 is within 0.2 of the identity and the mean within 0.2 of 0.

    Hint 1 (nudge): an N(0, I_D) vector is a uniformly random direction times an independent length. A QR
        factorisation of a Gaussian matrix gives you orthonormal directions; where do the lengths come from?
    Hint 2 (plan): ceil(m / D) blocks, each a (D, D) matrix of orthonormal rows; stack them and keep the
        first m rows; then scale row i by its own length; shape (m, D).
    Hint 3 (formula): for each block, factor a fresh D×D Gaussian matrix G = QR; multiply column j of Q by the
        sign of R's j-th diagonal entry (without it no row is uniformly distributed: notebook 04 measures the
        bias); the block's rows are the columns of that corrected Q. Row i's length is |g_i| for a fresh
        Gaussian vector g_i in R^D (a χ(D) draw), all from `generator`, in float64.
    """
    raise NotImplementedError("Task 4.2")


def favor_noncausal(q, k, v, projection):
    """Task 4.3: non-causal FAVOR+ attention, approximating softmax(q kᵀ/√D) v in O(N·m·D).

    Revisits notebook 04, sections 1.2 and 5.
    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), projection: (m, D)  ->  (B, H, N, Dv)
    The grader compares with minilin's favor_attention in float64 for two shapes (D = 8 and 4, N != M); checks
    that inputs with entries up to ±20 give finite outputs in float32, close (1e-3) to float64; and records
    the matrix products your function computes for N = 48, M = 64 (D = 4, m = 8): none may be as large as
    half of the (N, M) attention matrix in both dimensions. Never form the (N, M) matrix.

    Hint 1 (nudge): start from the ten-line FAVOR+ of notebook section 1.2. It returns nan for large inputs
        because exp over- or underflows. Which factors can you divide out of the features without changing the ratio?
    Hint 2 (plan): exponents (before exp) of shape (B, H, N, m) for queries and (B, H, M, m) for keys;
        subtract a (B, H, N, 1) shift from the queries and a (B, H, 1, 1) shift from the keys; exponentiate;
        then φ(K)ᵀ V is (B, H, m, Dv), φ(K)ᵀ 1 is (B, H, m), and one division gives (B, H, N, Dv).
    Hint 3 (formula): q' = q·D^(-1/4), k' = k·D^(-1/4); exponents e = x' Wᵀ − |x'|²/2; subtract from each query
        row its max over features, and from all key exponents one max over every key and feature (detach both:
        they cancel); out = φ(Q) (φ(K)ᵀ V) / φ(Q) (φ(K)ᵀ 1).
    """
    raise NotImplementedError("Task 4.3")


def causal_linear_attention(phi_q, phi_k, v):
    """Task 4.4: causal linear attention from given (positive) features, by prefix sums.

    Revisits notebook 04, section 6.
    phi_q: (B, H, N, m), phi_k: (B, H, N, m), v: (B, H, N, Dv)  ->  (B, H, N, Dv)
    Output i may use only positions j ≤ i. The grader compares with minilin's causal form and with a loop over
    the masked quadratic form for two shapes; checks that changing positions ≥ s never moves an output < s;
    and records the matrix products for N = 96 (m = 4, Dv = 3): none may have both dimensions ≥ 48.

    Hint 1 (nudge): non-causal linear attention keeps one summary of all keys and values. What changes if query
        i may only see keys up to i? Think of an RNN: what state would you carry from position to position?
    Hint 2 (plan): a running state of shape (B, H, m, Dv) and a running normaliser of shape (B, H, m), both
        zero at the start; for each position add key i's contribution, then read out row i; stack the N rows
        on dim 2. A loop over positions is the simplest correct answer ("Transformers are RNNs", arXiv
        2006.16236).
    Hint 3 (formula): S_i = Σ_{j≤i} φ(k_j) v_jᵀ, z_i = Σ_{j≤i} φ(k_j), out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i.
    """
    raise NotImplementedError("Task 4.4")


def favor_causal(q, k, v, projection):
    """Task 4.5 (extend task): causal FAVOR+ that is stable in float32 and whose stabiliser never reads ahead.

    Extends notebook 04, sections 5 and 6: section 5 stabilises the non-causal form with one maximum over all
    keys (Task 4.3), and section 6 computes causal prefix sums of given features (Task 4.4), says (Appendix E
    shows) that a maximum over all keys lets the future in once anything is added after the shift, and shows how
    a running maximum rescales the prefix state. Here you put them together: the whole causal estimator, stable
    in float32.
    q, k: (B, H, N, D), v: (B, H, N, Dv), projection: (m, D)  ->  (B, H, N, Dv), with x' = x·D^(-1/4).
    The grader checks, each on its own: equality (1e-10) in float64 with the unstabilised causal estimate
    out_i = Σ_{j≤i} φ(q_i)·φ(k_j) v_j / Σ_{j≤i} φ(q_i)·φ(k_j), for two shapes (D = 8 and 4, two lengths, B, H > 1);
    that scaling the keys at positions ≥ s by 4 leaves the outputs before s unchanged bit for bit (s = 1, 4,
    7, 9); that entries up to ±20 in float32 give a float32 output (no upcast), finite and within 1e-3 of the
    float64 result; and, for N = 96 (D = 4, m = 8, Dv = 3), that no matrix product has both dimensions ≥ 48 and
    no intermediate tensor holds N·M/2 elements or more (nothing the size of the attention matrix).

    Hint 1 (nudge): any positive factor that multiplies all the terms of query i's numerator and normaliser
        alike cancels. Which such factors may depend on key j, and on which keys may they depend, so that the
        output at i never depends on a key after i?
    Hint 2 (plan): compute the exponents of queries and keys as in Task 4.3; scale each query row by its own
        maximum; for the keys, keep the running maximum r_j over positions ≤ j of each key's largest exponent;
        carry a state and a normaliser as in Task 4.4, stored on the scale exp(−r_i); when r grows, multiply
        the old state and normaliser by exp(r_old − r_new) ≤ 1 before adding key i, whose features are scaled
        by exp(−r_i) too.
    Hint 3 (formula): e_jf = w_fᵀk'_j − |k'_j|²/2, r_j = max_{j'≤j} max_f e_j'f; S_i = e^(r_{i−1} − r_i) S_{i−1} +
        exp(e_i − r_i) v_iᵀ and z_i = e^(r_{i−1} − r_i) z_{i−1} + exp(e_i − r_i), with S_0 = z_0 = 0;
        out_i = φ̃(q_i)ᵀ S_i / φ̃(q_i)ᵀ z_i, φ̃(q_i) = exp(the query's exponents minus their row maximum).
    """
    raise NotImplementedError("Task 4.5")


def causal_prefix_attention(phi_q, phi_k, v):
    """Task 4.6 (extend task): causal linear attention when the N queries are the last N of M positions.

    Extends notebook 04, section 6, where queries and keys have the same length. After a prompt of M − N
    tokens has been read, only the N newest positions need outputs: query i (0-based among the N) sits at
    position i + M − N and may use keys j ≤ i + M − N (bottom-right alignment, as softmax_attention with
    causal=True and N != M).
    phi_q: (B, H, N, m), phi_k: (B, H, M, m), v: (B, H, M, Dv), N ≤ M  ->  (B, H, N, Dv)
    Raise ValueError when N > M. The grader checks, each on its own: a loop over the bottom-right masked
    quadratic form and minilin's causal form for three shapes (N < M and N = M); that N = 1 gives non-causal
    linear attention over all M keys; that changing the keys and values after position i + M − N (and later
    queries) leaves output i unchanged; the ValueError; and, for N = 64, M = 96 (m = 4, Dv = 3), that no
    matrix product has both dimensions ≥ 32 with one ≥ 48 (no (N, M) matrix).

    Hint 1 (nudge): the first M − N keys are seen by every query. What does Task 4.4's running state look like
        just before the first query is read out?
    Hint 2 (plan): check N ≤ M; build the state and the normaliser of the first M − N keys in one go (two
        matrix products of size m × Dv and m); then continue Task 4.4's recurrence over the N remaining keys,
        reading out query i after adding key i + M − N.
    Hint 3 (formula): with s = M − N: S_i = Σ_{j ≤ i+s} φ(k_j) v_jᵀ and z_i = Σ_{j ≤ i+s} φ(k_j);
        out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i, and S_{−1}, z_{−1} are the sums over the first s keys.
    """
    raise NotImplementedError("Task 4.6")


def positive_estimate_stats(x, y, nb_features, draws, generator):
    """Task 4.7 (measure task): the bias and the variance of the m-feature positive estimate, by sampling.

    Measures, on pairs notebook 04 did not use, what its section 2 derived: Lemma 2's variance of the estimate
    φ(x)·φ(y) of exp(xᵀy) with m = nb_features positive features (Task 4.1, no D^(-1/4) scaling).
    x, y: (D,) float64; returns a float64 tensor of shape (2,): [mean, variance] of `draws` independent estimates,
    each from its own fresh (m, D) projection whose entries are N(0, 1), every number drawn from `generator`.
    Before you run it, predict the variance from Lemma 2. The grader checks, each on its own: on two pairs with
    D = 6 and different norms (m = 8, 20000 draws) that the mean is within 4 standard errors of exp(xᵀy) and the
    variance within 10% of Lemma 2's; that the variance at m = 4 is 3.2 to 4.8 times the one at m = 16; and that
    the same seed gives the same numbers and another seed other numbers (a measurement, not a formula).

    Hint 1 (nudge): one estimate is an average of m terms, one per random direction. To measure the spread of
        the estimate, you need many estimates, each with its own directions.
    Hint 2 (plan): draw all directions at once, shape (draws, m, D); compute the m features of x and of y for
        every draw, shape (draws, m); one estimate per draw; then the mean and the (unbiased) variance of the
        `draws` estimates.
    Hint 3 (formula): estimate_r = (1/m) Σ_i exp(w_riᵀx − |x|²/2) · exp(w_riᵀy − |y|²/2); return the sample mean
        and the sample variance of estimate_1..estimate_draws. Lemma 2 predicts the variance
        exp(2xᵀy) · (exp(|x + y|²) − 1) / m.
    """
    raise NotImplementedError("Task 4.7")
