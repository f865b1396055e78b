"""Exercises for notebook 10: write the kernel.

Implement each function, then grade yourself:  python -m minilin grade --chapter 10
Shapes follow the course convention: q, k (B, H, N, Dk), v (B, H, N, Dv); log_decay (B, H, N) <= 0 is one log
decay per head and token (None: no decay). The tasks are graded in PyTorch: the grader needs no Triton.
Do not call minilin here (minilin.kernels is the reference the grader compares with; read it once you are done).

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""
import math

import torch


def reverse_scan(q, k, v, log_decay=None, chunk_size=16):
    """Task 10.1: the anti-causal scan of the backward, in chunks.

    q, k: (B, H, N, Dk), v: (B, H, N, Dv), log_decay: (B, H, N) <= 0 or None (no decay), chunk_size: a positive
    int (it need not divide N, and may exceed it)  ->  o (B, H, N, Dv) with, for every token j,
        o_j = Σ_{i ≥ j} exp(B_i − B_j) (q_j · k_i) v_i,    B_t = log_decay_1 + ... + log_decay_t (cumulative),
    the forward scan of notebook 10 run backwards in time: token j reads the keys and values at and after it, each
    decayed by the gates between j and i. No scale is applied. With it the backward of the forward scan is
        dv = reverse_scan(k, q̃, do, log_decay) and dk = reverse_scan(v, do, q̃, log_decay)   (q̃: the scaled q).
    Work chunk by chunk, from the last chunk to the first: inside a chunk a masked (c × c) matrix and a product with
    the chunk's values, plus what the state carried from the later chunks contributes; between chunks, one update
    of that state. Extends notebook 10, section 6, which states the anti-causal scan and leaves it to you, and its
    section 2, which builds the causal one. Checked against the definition for chunk sizes 1, 3, 4, 10 and 16 with
    N = 10 and Dk != Dv, without a decay, with one token, with log decays of −100 to −120 a token (a chunk's decay
    of e^−800 and more: its inverse overflows float64), and as dk and dv of the forward scan against autograd.
    The checks count the operators your function runs: a loop over tokens, where chunks are asked, fails, and so
    does a tensor as large as a whole (N × N) matrix per head.

    Hint 1 (nudge): the weight exp(B_i − B_j) for i ≥ j is the causal one with the roles of i and j swapped. Which
        triangle of the (c × c) matrix survives now, and which chunks does the carried state summarise?
    Hint 2 (plan): walk the chunks from the last to the first and collect the outputs in order. In a chunk, take
        cumulative sums a of the chunk's log decays from its start; the intra-chunk weights are the scores q_j · k_i
        times exp(a_i − a_j) on and above the diagonal (mask before the exponential); the carried state, the sum of
        the later chunks' k vᵀ decayed back to this chunk's last token, is read by each query decayed from its token
        to that last token; then the state is decayed through the whole chunk and each key of the chunk is added,
        decayed from its token back to just before the chunk's start.
    Hint 3 (formula): with a_t the cumulative log decay from the chunk's first token to t (inclusive), e its last
        token and G the state after it: o_j = Σ_{j ≤ i ≤ e} exp(a_i − a_j)(q_j · k_i) v_i + exp(a_e − a_j) Gᵀ q_j,
        and the next chunk (the one before) starts from G' = exp(a_e) G + Σ_i exp(a_i) k_i v_iᵀ. Every exponent is
        a difference that is <= 0.
    """
    raise NotImplementedError("Task 10.1")


def backward_cost(n, d, chunk, itemsize):
    """Task 10.2 (predict): the FLOPs and bytes of the two backward scans of minilin's kernel, for one head.

    n: tokens, d: head size (Dk = Dv = d), chunk: tokens a program handles per step, itemsize: bytes a number
    ->  (flops, bytes), two ints.
    The backward of minilin.kernels.chunk_scan (no decay, no initial or final state) is two kernels, each one
    program walking ceil(n / chunk) chunks; a ragged last chunk is computed as a whole chunk (masked loads fill
    it with zeros). Per chunk:
      - the dq scan is the forward scan with q -> do, k -> v, v -> k (notebook 10, section 6): the forward's four
        products;
      - the dk, dv scan (anti-causal) gives section 6's dk and dv for the chunk's tokens at once, from the chunk
        itself and one carried state G = Σ_(later tokens i) q_i do_iᵀ, which it then updates with the chunk's own
        tokens: derive the matrix products that takes (each (c × c) matrix it forms is used once).
    Count a product of an (m × k) by a (k × p) matrix as 2 m k p FLOPs and nothing else (the masks, exponentials
    and additions are elementwise and small). Bytes: the (n × d) tensors that cross HBM, each once; the states never.
    Extends notebook 10, section 5, which counts the forward the same way. Predict first: is the backward's
    intensity (flops / bytes) above or below the forward's (c + d) / itemsize, and does it depend on n? Checked
    against the count on five cases (a ragged last chunk, n smaller than a chunk, float32 and bfloat16).

    Hint 1 (nudge): split dv of the chunk's tokens into the pairs inside the chunk (a masked (c × c) matrix times
        do) and the later chunks (k times G); dk is the same with q, do and k, v trading places.
    Hint 2 (plan): list the products with their shapes, each (c × d)(d × c), (c × d)(d × d), (c × c)(c × d) or
        (d × c)(c × d) up to transposes; multiply each by its FLOPs, add, and multiply by the number of chunks,
        rounded up. For the bytes, count the (n × d) tensors read and written by the two kernels together.
    Hint 3 (formula): write the list of each kernel's products with their shapes, per chunk. The dq scan: the
        forward's, with section 6's substitution. The dk, dv scan: the two masked score matrices (k against q,
        v against do), each times the chunk's do or q; k and v times the carried state; and the state's update
        from the chunk's q and do. Price each at 2 m k p, sum, and multiply by the chunks. Bytes: the dq scan
        reads k, v, do and writes dq; the dk, dv scan reads q, k, v, do and writes dk and dv.
    """
    raise NotImplementedError("Task 10.2")
