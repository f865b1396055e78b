"""Exercises for notebook 04: Performer (FAVOR+) from scratch.

Implement each function, then grade yourself:  python -m minilin grade --chapter 4
Shapes: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); a projection is an (m, D) matrix whose rows are the
random directions w_i. Do not call minilin.performer here.
Reference: "Rethinking Attention with Performers", Choromanski et al. 2020, arXiv 2009.14794.
Required: Tasks 4.1 and 4.5. Optional: 4.2 and 4.3 (section 3's projection and section 5's stable FAVOR+,
without the package), 4.4, 4.6, and 4.7 (predict, then measure, Theorem 2's gain for Task 4.1's features).
"""
import torch


def hyperbolic_random_features(x, projection):
    """Task 4.1, part 1: the paper's positive *hyperbolic* random features (arXiv 2009.14794, section 2.3).

    Builds on notebook 04, sections 1.1 and 2.
    x: (..., N, D), projection W: (m, D) with rows w_i ~ N(0, I_D)  ->  (..., N, 2m); no D^(-1/4) scaling, no
    stabilisation. You have the Gaussian moment E_w[exp(wᵀs)] = exp(|s|²/2) for w ~ N(0, I_D), and the fact that
    −w has the same distribution as w. Derive a map of 2m positive features, the same map for x and y, with
    E[φ(x)·φ(y)] = exp(xᵀy): m features from the rows w_i (in W's order) first, then m from −w_i. Part 2,
    `hyperbolic_variance`, is the derivation: the task passes only with both. The grader checks, on fresh draws,
    the values, that φ(x)·φ(y) is unbiased, its sampled variance, and part 2 against the exact variance.

    Hint 1 (nudge): the estimate φ+ builds from w is just as unbiased when built from −w. What does the average of
        the two estimates become, and why can averaging two correlated estimates help?
    Hint 2 (plan): write that average as one dot product of 2m features: each feature of φ+ splits into a "w" and
        a "−w" part, so the constant in front changes; one matrix product gives every wᵢᵀx, shape (..., N, m).
    Hint 3 (formula): per direction, the two parts together give e^(−(|x|²+|y|²)/2) times the hyperbolic cosine of
        wᵢᵀ(x + y), and the estimate is the mean of these over the m directions.
    """
    raise NotImplementedError("Task 4.1")


def hyperbolic_variance(x, y, nb_features):
    """Task 4.1, part 2: the variance of φ(x)·φ(y) for your features of part 1, derived on paper.

    x, y: (..., D) float64, nb_features: m iid Gaussian directions  ->  (...,): for each pair, the exact variance
    of the m-direction estimate of exp(xᵀy), a closed form in x·y, |x + y|² and m (no sampling). The grader
    compares it with the exact variance on fresh pairs of several norms.

    Hint 1 (nudge): the m directions are independent, so how does the variance of the mean relate to the
        variance of one direction's term?
    Hint 2 (plan): one term's variance is E[term²] − (E[term])²; both expectations are Gaussian moments of
        wᵀs with s = x + y; then divide by m.
    Hint 3 (formula): you need E[cosh(wᵀs)] and E[cosh²(wᵀs)] (write cosh² through cosh(2wᵀs)), both from
        E[exp(wᵀs)] = exp(|s|²/2), and e^(−|x|²−|y|²) written with x·y and |x + y|². Check your result against
        Lemma 2's φ+ variance: it must be smaller.
    """
    raise NotImplementedError("Task 4.1")


def orthogonal_projection(nb_features, dim, generator):
    """Task 4.2 (optional): a block-orthogonal Gaussian projection (m, D), as in the paper's Theorem 2.

    Revisits notebook 04, section 3.
    Rows within a block of D rows are orthogonal, yet every row must still be marginally N(0, I_D) (so the
    estimator stays unbiased). Return float64, drawing every random number from `generator`. The grader checks,
    on fresh draws, orthonormal rows within each block, independent blocks, χ(D) lengths and uniform directions.

    Hint 1 (nudge): an N(0, I_D) vector is a uniformly random direction times an independent length. A QR
        factorisation of a Gaussian matrix gives you orthonormal directions; where do the lengths come from?
    Hint 2 (plan): ceil(m / D) blocks, each a (D, D) matrix of orthonormal rows; stack them and keep the
        first m rows; then scale row i by its own length; shape (m, D).
    Hint 3 (formula): a D×D Gaussian matrix has a uniformly distributed orthogonal factor only once the signs of
        QR's factors are fixed so that R's diagonal is positive (notebook 04, Appendix C; without it no row is
        uniformly distributed). The length of an N(0, I_D) vector is a χ(D) draw: the norm of another Gaussian
        vector, one per row.
    """
    raise NotImplementedError("Task 4.2")


def favor_noncausal(q, k, v, projection):
    """Task 4.3 (optional): non-causal FAVOR+ attention, approximating softmax(q kᵀ/√D) v in O(N·m·D).

    Revisits notebook 04, sections 1.2 and 5.
    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), projection: (m, D)  ->  (B, H, N, Dv)
    The grader checks, on fresh inputs, agreement with minilin in float64, finite float32 outputs for entries up to
    ±20, and that nothing the size of the (N, M) attention matrix is computed. Never form the (N, M) matrix.

    Hint 1 (nudge): start from the ten-line FAVOR+ of notebook section 1.2. It returns nan for large inputs
        because exp over- or underflows. Which factors can you divide out of the features without changing the ratio?
    Hint 2 (plan): exponents (before exp) of shape (B, H, N, m) for queries and (B, H, M, m) for keys;
        subtract a (B, H, N, 1) shift from the queries and a (B, H, 1, 1) shift from the keys; exponentiate;
        then φ(K)ᵀ V is (B, H, m, Dv), φ(K)ᵀ 1 is (B, H, m), and one division gives (B, H, N, Dv).
    Hint 3 (formula): a shift may depend on anything the ratio shares. A query's shift multiplies its numerator
        and its normaliser alike; a key shift must be the same for all keys of one feature (section 5 uses one
        per feature, C_f, which guarantees every normaliser >= 1; one shift over all keys and features is also
        exact, simpler, and enough for this task). The shifts are constants for the gradient (detach them).
    """
    raise NotImplementedError("Task 4.3")


def sliding_window_linear_attention(phi_q, phi_k, v, window):
    """Task 4.4 (optional): linear attention over a sliding window of keys, by prefix sums.

    Builds on notebook 04, section 6, where query i sees every key j <= i.
    phi_q: (B, H, N, m), phi_k: (B, H, N, m), v: (B, H, N, Dv), window >= 1  ->  (B, H, N, Dv)
    Output i may use only keys i − window < j <= i (the last `window` positions, itself included). The grader
    checks, on fresh inputs, agreement with the window-masked quadratic form, causality, and no (N, N) matrix.

    Hint 1 (nudge): section 6's prefix sum S_i holds every key up to i. Which two prefix sums together hold
        exactly the keys of the window?
    Hint 2 (plan): the prefix sums of φ(k_j) v_jᵀ and of φ(k_j), one per position (or kept as a running pair);
        for each query the window's sums come from two of them; then the read-out of section 6.
    Hint 3 (formula): with P_i = Σ_{j<i} φ(k_j) v_jᵀ (P_0 = 0) and p_i = Σ_{j<i} φ(k_j), the window of query i holds
        P_{i+1} − P_{max(0, i+1−window)} and the same difference of the p's; mind the first positions, whose
        window is cut short.
    """
    raise NotImplementedError("Task 4.4")


def favor_causal(q, k, v, projection):
    """Task 4.5: causal FAVOR+ that is stable in float32 and whose stabiliser never reads ahead.

    Extends notebook 04, sections 5 and 6: section 5 stabilises the non-causal form with maxima over all keys,
    which lets the future in; section 6 builds the causal prefix sums unstabilised and points to a running
    maximum. Here you build the whole causal estimator, stable in float32, with a stabiliser that uses only
    the keys so far.
    q, k: (B, H, N, D), v: (B, H, N, Dv), projection: (m, D)  ->  (B, H, N, Dv), with x' = x·D^(-1/4).
    The grader checks, on fresh inputs, agreement in float64 with the unstabilised causal estimate
    out_i = Σ_{j≤i} φ(q_i)·φ(k_j) v_j / Σ_{j≤i} φ(q_i)·φ(k_j), earlier outputs unchanged bit for bit when later
    keys grow, finite float32 outputs (no upcast) for entries up to ±20, and memory linear in N.

    Hint 1 (nudge): any positive factor that multiplies all the terms of query i's numerator and normaliser
        alike cancels. Which such factors may depend on key j, and on which keys may they depend, so that the
        output at i never depends on a key after i?
    Hint 2 (plan): the feature exponents wᵢᵀx' − |x'|²/2 (before exp), (B, H, N, m) for queries and for keys;
        each query row minus its own largest exponent; for the keys, one running number r_j, the largest
        exponent of the keys up to j, subtracted from key j's exponents; a prefix state and normaliser carried
        from position to position (section 6), always held on the scale of the current r.
    Hint 3 (formula): the invariant after key j is S_j = Σ_{i≤j} e^{a_i − r_j} [v_i | 1]ᵀ, a_i being key i's feature
        exponents: every key in it is on the scale of the current r_j, each e^{a_i − r_j} at most 1, so the
        normaliser's entries stay at most j + 1. Going from r_{j−1} to r_j rescales the old state by
        e^{r_{j−1} − r_j} ≤ 1.
    """
    raise NotImplementedError("Task 4.5")


def causal_prefix_attention(phi_q, phi_k, v):
    """Task 4.6 (optional): causal linear attention when the N queries are the last N of M positions.

    Extends notebook 04, section 6, where queries and keys have the same length. After a prompt of M − N
    tokens has been read, only the N newest positions need outputs: query i (0-based among the N) sits at
    position i + M − N and may use keys j ≤ i + M − N (bottom-right alignment, as softmax_attention with
    causal=True and N != M).
    phi_q: (B, H, N, m), phi_k: (B, H, M, m), v: (B, H, M, Dv), N ≤ M  ->  (B, H, N, Dv)
    Raise ValueError when N > M. The grader checks, on fresh inputs, agreement with the bottom-right masked
    quadratic form, causality, the ValueError, and memory linear in N and M.

    Hint 1 (nudge): the first M − N keys are seen by every query. What does section 6's running state look like
        just before the first query is read out?
    Hint 2 (plan): check N ≤ M; the state and the normaliser of the first M − N keys in one go (two matrix
        products); then section 6's prefix sums over the N remaining keys, query i read out after key i + M − N.
    Hint 3 (formula): query i's sums run over j ≤ i + M − N; the first M − N keys are in every one of them, so
        they form the state the first query starts from. Test N = 1 (all keys) and N = M (section 6) first.
    """
    raise NotImplementedError("Task 4.6")


def orthogonal_mse(x, y, nb_features, draws, generator):
    """Task 4.7 (optional): do orthogonal rows help the *hyperbolic* features of Task 4.1 more?

    Notebook 04 measures Theorem 2's gain for the positive features only (section 3: orthogonal / iid about 0.8).
    Here the estimate is the hyperbolic one of Task 4.1, φhyp(x)·φhyp(y) of exp(xᵀy) from m = `nb_features`
    directions (2m features; no D^(-1/4) scaling), with iid Gaussian rows and with block-orthogonal rows (your
    `orthogonal_projection` of Task 4.2), each over `draws` estimates that each use a fresh projection.
    x, y: (D,) float64; returns a float64 tensor of shape (2,): [MSE iid, MSE orthogonal]. Every random number
    from `generator`. Do not call minilin here.
    Before you run it, predict the ratio orthogonal / iid for m = D = 8, |x| ≈ |y| ≈ 0.65 and |x + y|² ≈ 0.9
    from Task 4.1's variance and Theorem 2, and compare it with the positive features' ratio. The grader checks, on
    fresh pairs, the iid MSE against Task 4.1's variance, the orthogonal MSE against Theorem 2, and that another
    seed gives other numbers (a measurement, not a formula).

    Hint 1 (nudge): orthogonal rows change only how the m terms of one estimate co-vary, not the variance of each
        term. How does the covariance of two cosh terms compare with that of two exp terms? Flipping the sign of
        one row leaves the distribution of a block unchanged.
    Hint 2 (plan): all iid projections at once, shape (draws, m, D); the orthogonal ones from one call of your
        Task 4.2 function for enough rows, cut so that each estimate gets its own block; then the same estimate
        and squared error for both.
    Hint 3 (formula): one estimate is the exponential of minus half the sum of the squared norms of x and y, times
        the mean over its m rows of the hyperbolic cosine of the row's dot product with x + y; the MSE is the mean
        over the draws of the squared difference from exp(xᵀy). For the prediction, work out Hint 1's question
        first, then what Theorem 2's gap is divided by.
    """
    raise NotImplementedError("Task 4.7")
