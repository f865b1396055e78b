"""Checks for exercises/ex10_kernel.py (Tasks 10.1-10.2), against the anti-causal scan's definition and the count.

Task 10.1 (the anti-causal scan of the backward, in chunks: notebook 10 builds only the causal one) and 10.2 (the
FLOPs and bytes of the two backward scans: the notebook counts only the forward; the chapter's predict task) are
extend tasks. Comparisons are in float64 on O(1) values: round-off is far below TOL = 1e-10. Task 10.1's checks also
count the operators the learner's function dispatches: a chunked form runs as many on one chunk of 64 tokens as on
one chunk of 8, a token loop eight times as many; and its work per token: flat in N with a carried state, growing
with N without one.
"""
import math

import torch
import torch.nn.functional as F

from minilin.grading.checks import Chapter, captured, check, close, equal, expect, kind, rand

CHAPTER = Chapter(10, "ex10_kernel", "write the kernel")


def anticausal(q, k, v, log_decay=None):
    """o_j = Σ_{i ≥ j} exp(B_i − B_j) (q_j · k_i) v_i, B the cumulative log decay: the (N × N) definition."""
    N = q.shape[2]
    if log_decay is None:
        log_decay = q.new_zeros(q.shape[:3])
    cum = log_decay.cumsum(-1)
    later = torch.ones(N, N, dtype=torch.bool, device=q.device).triu()  # [j, i]: i ≥ j
    weight = torch.exp((cum[..., None, :] - cum[..., :, None]).masked_fill(~later, -math.inf))
    return ((q @ k.transpose(-1, -2)) * weight) @ v


def forward_scan(q, k, v, log_decay):
    """The forward of notebook 10 (causal, the transpose of the above), for autograd."""
    N = q.shape[2]
    cum = log_decay.cumsum(-1)
    earlier = torch.ones(N, N, dtype=torch.bool).tril()
    weight = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~earlier, -math.inf))
    return ((q @ k.transpose(-1, -2)) * weight) @ v


def log_gates(*shape, seed, shift=0.0):
    return F.logsigmoid(rand(*shape, seed=seed) + shift)


def chunked_not_looped(one_chunk_64, one_chunk_8, chunks_of_8, chunks_of_8_long):
    """A step: one chunk of 64 tokens dispatches under twice the operators of one chunk of 8 (a token loop: 8x);
    no tensor holds N·N elements (one head's whole matrix) at N = 64 with chunks of 8; and from N = 64 to N = 256
    with chunks of 8, the matrix-product FLOPs and the elements the operators produce grow at most 1.5x per token
    (a carried state: flat; each chunk against all later keys, or the later state summed again each chunk: N x)."""
    def judge(*got):
        expect(all(isinstance(g, dict) and isinstance(g.get("ops"), int) for g in got), one_chunk_64,
               f"returned {kind(got[0])}; expected the function's output")
        long, short = got[0]["ops"], got[1]["ops"]
        expect(long < 2 * short, one_chunk_64, f"ran {long} PyTorch operators on one chunk of 64 tokens against "
               f"{short} on one chunk of 8: the work grows with the tokens inside a chunk, as a loop over tokens "
               f"does; form each chunk's (c x c) matrix and its products at once")
        largest, full = got[2].get("largest", 0), 64 * 64
        expect(largest < full, chunks_of_8, f"an intermediate tensor of {largest} elements at N = 64 with chunks "
               f"of 8, as many as N·N = {full}: a whole (N x N) matrix, for one head or more (a loop over batches "
               f"or heads does not avoid it); work within chunks")
        for key, what in (("flops", "matrix-product FLOPs"), ("produced", "elements produced by the operators")):
            at_64, at_256 = got[2].get(key, 0) / 64, got[3].get(key, 0) / 256
            expect(at_256 <= 1.5 * at_64, chunks_of_8_long, f"{what} per token: {at_64:.0f} at N = 64 and "
                   f"{at_256:.0f} at N = 256, chunks of 8: the work per token grows with N, as it does when each "
                   f"chunk meets all the later keys (or sums their state again); carry one state from chunk to "
                   f"chunk, decayed and updated once per chunk")
    return check(one_chunk_64, one_chunk_8, chunks_of_8, chunks_of_8_long, judge=judge)


# --- 10.1 --------------------------------------------------------------------------------------------------------
@CHAPTER.task("10.1", "reverse_scan", extend=True)
def reverse_scan(f):
    """the anti-causal scan in chunks, with a decay per head and token"""
    q, k, v = rand(2, 3, 10, 4, seed=1), rand(2, 3, 10, 4, seed=2), rand(2, 3, 10, 3, seed=3)
    g = log_gates(2, 3, 10, seed=4, shift=1.0)
    for chunk in (1, 3, 4, 10, 16):
        yield close(f(q, k, v, g, chunk), anticausal(q, k, v, g),
                    what=f"o_j = Σ_(i ≥ j) exp(B_i − B_j)(q_j · k_i) v_i, N = 10, Dk = 4, Dv = 3, chunk_size={chunk}")
    q2, k2, v2 = rand(3, 2, 13, 6, seed=5), rand(3, 2, 13, 6, seed=6), rand(3, 2, 13, 5, seed=7)
    yield close(f(q2, k2, v2, None, 5), anticausal(q2, k2, v2),
                what="log_decay=None (no decay): the anti-causal sums, N = 13, chunks of 5 (the first one of 5, "
                     "the last of 3)")
    q1, k1, v1, g1 = rand(2, 2, 1, 3, seed=8), rand(2, 2, 1, 3, seed=9), rand(2, 2, 1, 4, seed=10), \
        log_gates(2, 2, 1, seed=11)
    yield close(f(q1, k1, v1, g1, 4), anticausal(q1, k1, v1, g1), what="one token (N = 1), chunks of 4")
    q3, k3, v3 = rand(2, 2, 16, 4, seed=12), rand(2, 2, 16, 4, seed=13), rand(2, 2, 16, 3, seed=14)
    g3 = -100.0 - 20.0 * torch.rand(2, 2, 16, generator=torch.Generator().manual_seed(15), dtype=torch.float64)
    g3[:, 1] = log_gates(2, 16, seed=16, shift=2.0)  # one head keeps its memory
    yield close(f(q3, k3, v3, g3, 8), anticausal(q3, k3, v3, g3),
                what="log decays of -100 to -120 a token on one head of two, chunks of 8 (a chunk's total decay of "
                     "e^-800 and more: its inverse overflows)")
    # as the backward: dk and dv of the forward scan o = Σ_(j ≤ i) exp(B_i − B_j)(q_i · k_j) v_j, against autograd
    q4, k4, v4, do = (rand(2, 2, 12, 4, seed=s) for s in (17, 18, 19, 20))
    g4 = log_gates(2, 2, 12, seed=21, shift=1.0)
    leaves = [t.clone().requires_grad_() for t in (q4, k4, v4)]
    _, dk, dv = torch.autograd.grad((forward_scan(*leaves, g4) * do).sum(), leaves)
    yield close(f(v4, do, q4, g4, 5), dk, what="dk of the forward scan by autograd: reverse_scan(v, do, q, log_decay)")
    yield close(f(k4, q4, do, g4, 5), dv, what="dv of the forward scan by autograd: reverse_scan(k, q, do, log_decay)")
    b, h = 2, 2
    long, short, longer = ([rand(b, h, n, 4, seed=22 + i) for i in range(3)] + [log_gates(b, h, n, seed=25)]
                           for n in (64, 8, 256))
    yield chunked_not_looped(captured(f(*long, 64), "matmul_shapes"), captured(f(*short, 8), "matmul_shapes"),
                             captured(f(*long, 8), "matmul_shapes"), captured(f(*longer, 8), "matmul_shapes"))


# --- 10.2 --------------------------------------------------------------------------------------------------------
def count(n, d, chunk, itemsize):
    """minilin.kernels.scan's two backward kernels, counted: bwd_dq (two (c x c)-sized and two state products a
    chunk) and bwd_dkdv (four and three); 2 m k p FLOPs a product; 10 (n x d) tensors across HBM."""
    chunks = -(-n // chunk)
    return chunks * (12 * chunk * chunk * d + 10 * chunk * d * d), 10 * n * d * itemsize


@CHAPTER.task("10.2", "backward_cost", extend=True)
def backward_cost(f):
    """predict the backward's FLOPs and bytes"""
    for args, name in (((4096, 64, 64, 2), "n = 4,096, d = 64, chunks of 64, bfloat16"),
                       ((1000, 32, 16, 4), "n = 1,000 (a ragged last chunk of 8), d = 32, chunks of 16, float32"),
                       ((10, 128, 64, 2), "n = 10 < one chunk of 64, d = 128, bfloat16"),
                       ((65536, 64, 128, 2), "n = 65,536, d = 64, chunks of 128, bfloat16"),
                       ((300, 16, 32, 4), "n = 300, d = 16 < chunk = 32, float32")):
        yield equal(f(*args), count(*args), what=f"(FLOPs, bytes) of the two backward scans, {name}, "
                                                 f"(n, d, chunk, itemsize) = {args}")
