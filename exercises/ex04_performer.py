"""Exercises for notebook 04: Performer (FAVOR+) from scratch.

Implement each function, then grade yourself:  python -m minilin grade --chapter 4
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv); a projection is an
(m, D) matrix whose rows are the random directions w_i. Do not call minilin.performer here.
Reference: "Rethinking Attention with Performers", Choromanski et al. 2020, arXiv 2009.14794.
"""
import torch


def positive_random_features(x, projection):
    """Task 4.1: Lemma 1's positive random features (notebook 04, section 1.1).

    x: (..., N, D), projection W: (m, D) with rows w_i ~ N(0, I_D)  ->  (..., N, m)
    With these features φ(x)·φ(y) must be an unbiased estimate of exp(xᵀy). No D^(-1/4) scaling here and
    no stabilisation: the plain estimator.

    Hints, one tier at a time:
      1. Complete the square: E_w[exp(wᵀs)] = exp(|s|²/2). Which factor, depending on x alone, turns
         E[exp(wᵀx) exp(wᵀy)] into exp(xᵀy)? And what makes an average of m terms out of a dot product?
      2. Plan: one matrix product gives all wᵢᵀx at once, shape (..., N, m); a per-row correction of shape
         (..., N, 1) broadcasts over the m features; exponentiate; divide by a constant.
      3. φ(x)_i = exp(wᵢᵀx − |x|²/2) / √m: the exponent is the i-th projection of x minus half of x's squared
         norm (one value per row, broadcast over the m features).
    """
    raise NotImplementedError("Task 4.1")


def orthogonal_projection(nb_features, dim, generator):
    """Task 4.2: a block-orthogonal Gaussian projection (m, D), as in the paper's Theorem 2 (notebook 04, section 3).

    Rows within a block of D rows are orthogonal, yet every row must still be marginally N(0, I_D) (so the
    estimator stays unbiased). Return float64, drawing every random number from `generator`. The grader checks:
    the shape (m, D) and dtype; that after normalising each row, rows 0..D-1, D..2D-1, … (the last block
    possibly shorter) are orthonormal, while two blocks are not orthogonal to each other (independent draws);
    that the row lengths vary (not all √D); that two calls with generators seeded alike return the same
    matrix; and, on 900 rows of D = 3, that wᵀw/900 is within 0.2 of the identity (E[w wᵀ] = I) and the mean
    of the entries within 0.2 of 0. Any order of drawing that meets these is accepted.

    Hints, one tier at a time:
      1. An N(0, I_D) vector is a uniformly random direction times an independent length. A QR factorisation
         of a Gaussian matrix gives you orthonormal directions; where do the lengths come from?
      2. Plan: ceil(m / D) blocks, each a (D, D) matrix of orthonormal rows; stack them to (ceil(m/D)·D, D)
         and keep the first m rows; then scale row i by its own length; shape (m, D).
      3. In formulas: for each block, factor a fresh D×D Gaussian matrix G = QR; multiply column j of Q by the
         sign of R's j-th diagonal entry (without it no row is uniformly distributed: notebook 04 measures the
         bias); the block's rows are the columns of that corrected Q. Row i's length is |g_i| for a fresh
         Gaussian vector g_i in R^D (a χ(D) draw), all from `generator`, in float64.
    """
    raise NotImplementedError("Task 4.2")


def favor_noncausal(q, k, v, projection):
    """Task 4.3: non-causal FAVOR+ attention, approximating softmax(q kᵀ/√D) v in O(N·m·D) (notebook 04,
    sections 1.2 and 5).

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), projection: (m, D)  ->  (B, H, N, Dv)
    Inputs with entries up to |x| = 20 must give finite outputs in float32. Never form the (N, M) matrix.

    Hints, one tier at a time:
      1. Start from the notebook's `favor_minimal`. It returns nan for large inputs because exp over- or
         underflows. Which factors can you divide out of the features without changing the ratio?
      2. Plan: exponents (before exp) of shape (B, H, N, m) for queries and (B, H, M, m) for keys; subtract
         a (B, H, N, 1) shift from the queries and a (B, H, 1, 1) shift from the keys; exponentiate; then
         φ(K)ᵀ V is (B, H, m, Dv), φ(K)ᵀ 1 is (B, H, m), and one division gives (B, H, N, Dv).
      3. q' = q·D^(-1/4), k' = k·D^(-1/4); exponents e = x' Wᵀ − |x'|²/2; subtract from each query row its max
         over features, and from all key exponents one max over every key and feature (detach both: they
         cancel); out = φ(Q) (φ(K)ᵀ V) / φ(Q) (φ(K)ᵀ 1).
    """
    raise NotImplementedError("Task 4.3")


def causal_linear_attention(phi_q, phi_k, v):
    """Task 4.4: causal linear attention from given (positive) features, by prefix sums (notebook 04, section 6).

    phi_q: (B, H, N, m), phi_k: (B, H, N, m), v: (B, H, N, Dv)  ->  (B, H, N, Dv)
    Output i may use only positions j ≤ i (the grader checks for future leakage).

    Hints, one tier at a time:
      1. Non-causal linear attention keeps one summary of all keys and values. What changes if query i may
         only see keys up to i? Think of an RNN: what state would you carry from position to position?
      2. Plan: a running state S of shape (B, H, m, Dv) and z of shape (B, H, m), both zero at the start;
         for each position i add key i's contribution, then read out row i; stack the N rows on dim 2.
         A loop over positions is the simplest correct answer ("Transformers are RNNs", arXiv 2006.16236).
      3. S_i = Σ_{j≤i} φ(k_j) v_jᵀ, z_i = Σ_{j≤i} φ(k_j), out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i.
    """
    raise NotImplementedError("Task 4.4")
