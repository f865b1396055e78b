"""Checks for exercises/ex09_gates.py (Tasks 9.1-9.5), against minilin.gated's token-by-token definition.

All five go beyond what notebook 09 builds: the chapter's idea on a case no notebook cell solves. Core: 9.5
(the chapter's core skill, gates in a chunked recurrence: notebook 09's chunked retention with a data-dependent
scalar gate per token and head, cumulative log-gates inside each chunk, a ragged last chunk and an initial state)
and 9.3 (the gated delta rule writing one key again and again: the error's closed form). Optional: 9.4 (a short
warm-up: the context length where exact attention's KV cache passes a hybrid model's memory), and the
challenges 9.1 (the gated delta rule's chunk form, where the notebook derives only the ungated one) and 9.2 (the
chunked form for GLA's per-feature gates, where the notebook gives only a scalar decay). Every comparison is
in float64 on O(1) values, so only round-off (well under the tolerance TOL = 1e-10 for the short sequences here)
separates a correct answer from the reference.
"""
import torch
import torch.nn.functional as F

from minilin.gated import recurrent_reference, state_bytes, step
from minilin.grading.checks import Chapter, captured, check, close, equal, expect, kind, rand, raises

CHAPTER = Chapter(9, "ex09_gates", "decay, gates and the delta rule")
ITEMSIZE = {2: torch.bfloat16, 4: torch.float32, 8: torch.float64}  # bytes per number -> dtype


def unit(*shape, seed):
    x = rand(*shape, seed=seed)
    return x / x.norm(dim=-1, keepdim=True)


def log_gates(*shape, seed, shift=0.0):
    """log σ(x + shift) <= 0: gates that keep exp(·) in (0, 1) of the state each token."""
    return F.logsigmoid(rand(*shape, seed=seed) + shift)


# --- helpers of 9.1 and 9.2 --------------------------------------------------------------------------------------
def no_square_intermediate(call, b, h, n):
    """A step: no tensor any operation produces holds B·H·N·N elements or more, and no matrix product is (N x N):
    the chunked form never builds the whole sequence's decay matrix."""
    def judge(got):
        products = got.get("products") if isinstance(got, dict) else None
        expect(isinstance(products, list), call, f"returned {kind(got)}; expected the function's output")
        square = sorted({p for p in products if tuple(p) == (n, n)})
        expect(not square, call, f"formed a matrix product of shape {square[:1]}: an (N x N) = ({n} x {n}) matrix "
                                 f"over the whole sequence; work within chunks and carry the state between them")
        full = b * h * n * n
        expect(got.get("largest", 0) < full, call, f"an intermediate tensor of {got.get('largest')} elements, as "
               f"many as B·H·N·N = {full}: an (N x N) matrix per (batch, head), built without a matrix product "
               f"(broadcasting counts too); work within chunks of the given size")
    return check(call, judge=judge)


def work_in_chunks(small, large, n, c_small, c_large):
    """A step: the number of operators run falls with the chunk size (it grows like N/C, not like N): with chunks
    c_large = 4·c_small, at most half as many as with c_small, unless even c_small needs fewer operators than
    there are tokens (a form with no loop at all). A token loop runs the same operators whatever chunk_size."""
    def judge(few, many):
        counts = [got.get("ops") if isinstance(got, dict) else None for got in (few, many)]
        expect(all(isinstance(c, int) for c in counts), small, f"returned {kind(few)}; expected the function's output")
        at_small, at_large = counts
        expect(at_small < n or 2 * at_large <= at_small, large,
               f"ran {at_large} torch operators with chunk_size={c_large} and {at_small} with chunk_size={c_small} "
               f"on N = {n} tokens: the work does not shrink with larger chunks, as a loop over the tokens' "
               f"{n} steps would. Do the work of a chunk in a few batched operations (a masked (c x c) matrix, "
               f"matrix products with the chunk's keys and values) and loop over the N/C chunks only")
    return check(small, large, judge=judge)


# --- 9.1 ---------------------------------------------------------------------------------------------------------
@CHAPTER.task("9.1", "chunked_gated_delta", extend=True)
def chunked_gated_delta(f):
    """the gated delta rule in chunks: one triangular solve per chunk, the decays inside it"""
    q, k, v = rand(2, 3, 10, 4, seed=1), unit(2, 3, 10, 4, seed=2), rand(2, 3, 10, 4, seed=3)
    beta, la = torch.sigmoid(rand(2, 3, 10, seed=4)), log_gates(2, 3, 10, seed=5, shift=1.0)
    expected = recurrent_reference(q, k, v, log_decay=la, beta=beta, return_state=True)
    for chunk in (1, 3, 4, 10, 16):
        yield close(f(q, k, v, beta, la, chunk), expected,
                    what=f"minilin.gated.recurrent_reference(q, k, v, log_decay=log_alpha, beta=beta, "
                         f"return_state=True): (o, final state), N = 10, Dk = Dv = 4, chunk_size={chunk}")
    q2, k2, v2 = rand(3, 2, 13, 6, seed=11), unit(3, 2, 13, 6, seed=12), rand(3, 2, 13, 5, seed=13)
    beta2, la2, s0 = torch.sigmoid(rand(3, 2, 13, seed=14)), log_gates(3, 2, 13, seed=15), rand(3, 2, 6, 5, seed=16)
    yield close(f(q2, k2, v2, beta2, la2, 5, initial_state=s0),
                recurrent_reference(q2, k2, v2, log_decay=la2, beta=beta2, initial_state=s0, return_state=True),
                what="the reference with N = 13, Dk = 6, Dv = 5, an initial state and chunks of 5 (the last one of 3)")
    zero = torch.zeros(3, 2, 13, dtype=torch.float64)
    yield close(f(q2, k2, v2, beta2, zero, 4, initial_state=s0),
                recurrent_reference(q2, k2, v2, beta=beta2, initial_state=s0, return_state=True),
                what="log_alpha = 0 (α = 1): the plain delta rule, recurrent_reference with beta only, chunks of 4")
    decay = torch.exp(la2.cumsum(-1))  # (B, H, N): α_1 ⋯ α_t
    decayed = (decay[..., None] * (q2 @ s0) / 6 ** 0.5, decay[..., -1, None, None] * s0)
    yield close(f(q2, k2, v2, zero, la2, 4, initial_state=s0), decayed,
                what="β = 0: nothing is written, o_t = (α_1⋯α_t S_0)ᵀ q_t / √Dk and the final state α_1⋯α_N S_0")
    k3 = rand(3, 2, 13, 6, seed=17) * 0.5  # keys that are not unit length; β = 1 on every third token
    beta3 = torch.where(torch.arange(13) % 3 == 0, 1.0, 0.4).to(torch.float64).expand(3, 2, 13)
    yield close(f(q2, k3, v2, beta3, la2, 4, initial_state=s0),
                recurrent_reference(q2, k3, v2, log_decay=la2, beta=beta3, initial_state=s0, return_state=True),
                what="the reference with keys that are not unit length and β = 1 on every third token, chunks of 4")
    # gates that close almost completely: e^-100 a token, e^-800 across a chunk of 8 (exp(800) overflows float64)
    q4, k4, v4 = rand(2, 2, 16, 4, seed=20), unit(2, 2, 16, 4, seed=21), rand(2, 2, 16, 3, seed=22)
    la4 = -100.0 - 20.0 * torch.rand(2, 2, 16, generator=torch.Generator().manual_seed(23), dtype=torch.float64)
    beta4, s4 = torch.sigmoid(rand(2, 2, 16, seed=24)), rand(2, 2, 4, 3, seed=25)
    yield close(f(q4, k4, v4, beta4, la4, 8, initial_state=s4),
                recurrent_reference(q4, k4, v4, log_decay=la4, beta=beta4, initial_state=s4, return_state=True),
                what="the reference with log decays of -100 to -120 a token, chunks of 8 (a chunk's total decay "
                     "e^-800 and more: its inverse overflows)")
    q5, k5, v5 = rand(2, 2, 32, 4, seed=26), unit(2, 2, 32, 4, seed=27), rand(2, 2, 32, 3, seed=28)
    yield no_square_intermediate(captured(f(q5, k5, v5, torch.sigmoid(rand(2, 2, 32, seed=29)),
                                            log_gates(2, 2, 32, seed=30, shift=2.0), 4), "matmul_shapes"), 2, 2, 32)
    q6, k6, v6 = rand(1, 2, 128, 4, seed=31), unit(1, 2, 128, 4, seed=32), rand(1, 2, 128, 3, seed=33)
    beta6, la6 = torch.sigmoid(rand(1, 2, 128, seed=34)), log_gates(1, 2, 128, seed=35, shift=2.0)
    yield work_in_chunks(captured(f(q6, k6, v6, beta6, la6, 8), "matmul_shapes"),
                         captured(f(q6, k6, v6, beta6, la6, 32), "matmul_shapes"), 128, 8, 32)


# --- 9.2 ---------------------------------------------------------------------------------------------------------
@CHAPTER.task("9.2", "chunked_gla", extend=True)
def chunked_gla(f):
    """GLA's per-feature gates in chunks: the masked intra-chunk matrix and the carried state"""
    q, k, v = rand(2, 3, 10, 4, seed=51), rand(2, 3, 10, 4, seed=52), rand(2, 3, 10, 4, seed=53)
    g = log_gates(2, 3, 10, 4, seed=54, shift=1.0)
    expected = recurrent_reference(q, k, v, log_decay=g, return_state=True)
    for chunk in (1, 3, 4, 10, 16):
        yield close(f(q, k, v, g, chunk), expected,
                    what=f"minilin.gated.recurrent_reference(q, k, v, log_decay=log_gate, return_state=True): "
                         f"(o, final state), N = 10, Dk = Dv = 4, chunk_size={chunk}")
    q2, k2, v2 = rand(3, 2, 13, 6, seed=55), rand(3, 2, 13, 6, seed=56), rand(3, 2, 13, 5, seed=57)
    g2, s0 = log_gates(3, 2, 13, 6, seed=58), rand(3, 2, 6, 5, seed=59)
    yield close(f(q2, k2, v2, g2, 5, initial_state=s0),
                recurrent_reference(q2, k2, v2, log_decay=g2, initial_state=s0, return_state=True),
                what="the reference with N = 13, Dk = 6, Dv = 5, an initial state and chunks of 5 (the last one of 3)")
    zero = torch.zeros(3, 2, 13, 6, dtype=torch.float64)
    yield close(f(q2, k2, v2, zero, 4, initial_state=s0),
                recurrent_reference(q2, k2, v2, initial_state=s0, return_state=True),
                what="log_gate = 0 (gates wide open): plain causal linear attention from the initial state")
    # gates that close almost completely: e^-100 a token, e^-800 across a chunk of 8 (exp(800) overflows float64)
    q3, k3, v3 = rand(2, 2, 16, 4, seed=60), rand(2, 2, 16, 4, seed=61), rand(2, 2, 16, 3, seed=62)
    g3 = -100.0 - 20.0 * torch.rand(2, 2, 16, 4, generator=torch.Generator().manual_seed(63), dtype=torch.float64)
    g3[..., 1] = log_gates(2, 2, 16, seed=64, shift=2.0)  # one feature keeps its memory
    yield close(f(q3, k3, v3, g3, 8, initial_state=rand(2, 2, 4, 3, seed=65)),
                recurrent_reference(q3, k3, v3, log_decay=g3, initial_state=rand(2, 2, 4, 3, seed=65),
                                    return_state=True),
                what="the reference with log gates of -100 to -120 a token on three features of four, chunks of 8 "
                     "(a chunk's total decay e^-800 and more: its inverse overflows)")
    q4, k4, v4 = rand(2, 2, 32, 4, seed=66), rand(2, 2, 32, 4, seed=67), rand(2, 2, 32, 3, seed=68)
    yield no_square_intermediate(captured(f(q4, k4, v4, log_gates(2, 2, 32, 4, seed=69), 4), "matmul_shapes"),
                                 2, 2, 32)
    q5, k5, v5 = rand(1, 2, 128, 4, seed=70), rand(1, 2, 128, 4, seed=71), rand(1, 2, 128, 3, seed=72)
    g5 = log_gates(1, 2, 128, 4, seed=73, shift=2.0)
    yield work_in_chunks(captured(f(q5, k5, v5, g5, 8), "matmul_shapes"),
                         captured(f(q5, k5, v5, g5, 32), "matmul_shapes"), 128, 8, 32)


# --- 9.3 ---------------------------------------------------------------------------------------------------------
def write_loop(s0, k, v, beta, log_alpha, t):
    """v − S_tᵀ k after t gated delta-rule writes of (k, v) with strength β and decay exp(log_alpha), by
    minilin.gated.step."""
    state = s0
    for _ in range(t):
        _, state = step(k, k, v, state, log_decay_t=log_alpha, beta_t=beta)
    return v - (state * k[..., :, None]).sum(-2)


@CHAPTER.task("9.3", "repeated_write_error", extend=True)
def repeated_writes(error):
    """the gated delta rule writing one key again and again: the error after t writes, in closed form"""
    b, h, dk, dv = 2, 3, 4, 5
    k, v, s0 = unit(b, h, dk, seed=70), rand(b, h, dv, seed=71), rand(b, h, dk, dv, seed=72)
    beta = torch.tensor([[0.0, 0.2, 0.5], [1.0, 1.5, 1.9]], dtype=torch.float64)
    la = torch.tensor([[-0.1, -2.0, -0.5], [-0.3, -0.05, -1.0]], dtype=torch.float64)
    for t in (0, 1, 3, 8):
        yield close(error(s0, k, v, beta, la, t), write_loop(s0, k, v, beta, la, t), atol=1e-10, rtol=1e-9,
                    what=f"v − S_tᵀ k after t = {t} writes by minilin.gated.step (unit keys, β = 0, 0.2, 0.5 / "
                         f"1, 1.5, 1.9 and log α = −0.1, −2, −0.5 / −0.3, −0.05, −1 per head)")
    no_gate = torch.zeros(b, h, dtype=torch.float64)
    yield close(error(s0, k, v, beta, no_gate, 3), write_loop(s0, k, v, beta, no_gate, 3), atol=1e-10, rtol=1e-9,
                what="log α = 0 (α = 1, no gate): the delta rule of section 1, t = 3; with β = 0 nothing changes")
    yield close(error(s0, k, v, torch.ones(b, h, dtype=torch.float64), la, 1), torch.zeros(b, h, dv, dtype=torch.float64),
                atol=1e-12, what="zeros: β = 1 and a unit key, one write recalls v exactly, whatever α")
    k2 = rand(3, 2, 6, seed=73) * 0.7  # norms from about 0.7 to 2.5
    v2, s2 = rand(3, 2, 3, seed=74), rand(3, 2, 6, 3, seed=75)
    beta2, la2 = torch.sigmoid(rand(3, 2, seed=76)) * 0.3, log_gates(3, 2, seed=77, shift=1.0)
    beta2 = torch.minimum(beta2, 1.6 / (k2 * k2).sum(-1))  # β|k|² <= 1.6: |ρ| < 1, t = 10^6 settles
    for t in (2, 5):
        yield close(error(s2, k2, v2, beta2, la2, t), write_loop(s2, k2, v2, beta2, la2, t), atol=1e-10, rtol=1e-9,
                    what=f"the loop with keys that are not unit length (Dk = 6, Dv = 3), t = {t}")
    c2 = (k2 * k2).sum(-1)
    alpha2, shrink2 = torch.exp(la2), 1 - beta2 * c2
    settled = ((1 - alpha2) * shrink2 / (1 - alpha2 * shrink2))[..., None] * v2  # e = ρ e + (1 − α)(1 − βc) v, solved
    yield close(error(s2, k2, v2, beta2, la2, 10 ** 6), settled, atol=1e-10, rtol=1e-9,
                what="t = 10^6: the settled error (the fixed point of one write), keys not unit length")
    yield closed_form(captured(error(s0, k, v, beta, la, 4), "matmul_shapes"),
                      captured(error(s0, k, v, beta, la, 256), "matmul_shapes"), 4, 256)


def closed_form(few, many, t_few, t_many):
    """A step: the number of torch operators does not grow with t (a formula), as a loop over the writes would."""
    def judge(a, b):
        counts = [got.get("ops") if isinstance(got, dict) else None for got in (a, b)]
        expect(all(isinstance(c, int) for c in counts), few, f"returned {kind(a)}; expected the function's output")
        expect(counts[1] <= counts[0] + 4, many,
               f"ran {counts[1]} torch operators for t = {t_many} writes and {counts[0]} for t = {t_few}: the work "
               f"grows with t, as a loop over the writes does. Find what one write does to the error and apply it "
               f"t times in one operation")
    return check(few, many, judge=judge)


# --- 9.4 ---------------------------------------------------------------------------------------------------------
def kv_cache_bytes(layers, heads, n, dim_head, itemsize):
    return 2 * layers * heads * n * dim_head * itemsize  # keys and values, every layer, every past token


def hybrid_bytes(layers, exact_layers, heads, n, dim_head, dim_k, dim_v, kv_itemsize, state_itemsize):
    return kv_cache_bytes(exact_layers, heads, n, dim_head, kv_itemsize) + \
        state_bytes(dim_k, dim_v, heads, layers - exact_layers, dtype=ITEMSIZE[state_itemsize])


@CHAPTER.task("9.4", "memory_crossover", extend=True)
def memory_crossover(f):
    """the context length at which exact attention's KV cache first exceeds a hybrid model's memory"""
    cases = ((24, 6, 16, 64, 64, 64, 2, 4), (32, 4, 32, 128, 128, 256, 2, 4), (12, 3, 8, 64, 64, 64, 2, 2),
             (16, 4, 8, 96, 64, 80, 2, 4), (10, 0, 4, 32, 48, 40, 4, 4), (6, 2, 4, 16, 16, 16, 8, 8),
             (9, 8, 2, 80, 32, 96, 4, 8))
    for args in cases:
        call = f(*args)

        def crossover(n, args=args, call=call):
            layers, exact, heads, dh, dk, dv, kv, s = args
            expect(type(n) is int and n >= 1, call, f"returned {kind(n)}, expected a Python int >= 1")
            where = (f"2·layers·heads·n·dim_head·{kv} bytes against {exact} exact layers' cache plus "
                     f"minilin.gated.state_bytes({dk}, {dv}, {heads}, {layers - exact}) in {s}-byte numbers")
            full, hybrid = kv_cache_bytes(layers, heads, n, dh, kv), hybrid_bytes(*args[:3], n, *args[3:])
            expect(full > hybrid, call, f"at n = {n} exact attention keeps {full:,} bytes and the hybrid {hybrid:,}: "
                   f"not more ({where})")
            before, hybrid_before = kv_cache_bytes(layers, heads, n - 1, dh, kv), hybrid_bytes(*args[:3], n - 1,
                                                                                               *args[3:])
            expect(n == 1 or before <= hybrid_before, call, f"at n = {n - 1} exact attention already keeps more, "
                   f"{before:,} bytes against {hybrid_before:,}: the crossover is shorter ({where})")
        yield check(call, judge=crossover)
    yield equal(f(8, 8, 4, 64, 64, 64, 2, 4), None, what="None: a hybrid with every layer exact is exact attention")
    yield raises(f(8, 9, 4, 64, 64, 64, 2, 4), "ValueError", why="for more exact layers than layers")
    yield raises(f(8, -1, 4, 64, 64, 64, 2, 4), "ValueError", why="for a negative number of exact layers")



# --- 9.5 ---------------------------------------------------------------------------------------------------------
def reference_95(q, k, v, log_alpha, initial_state=None):
    """The token loop with a scalar gate per token and head, no 1/√Dk (notebook 09's chunked_retention)."""
    return recurrent_reference(q, k, v, log_decay=log_alpha, scale=1.0, initial_state=initial_state,
                               return_state=True)


def causal(early, late, t):
    """A step: the outputs before token t are the same when tokens t, t+1, ... change (q, k, v and gates)."""
    def judge(a, b):
        outs = [got[0] if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor) else None
                for got in (a, b)]
        expect(all(o is not None and o.ndim == 4 and o.shape[2] > t for o in outs), early,
               f"returned {kind(a)}; expected (o (B, H, N, Dv), final state)")
        gap = float((outs[0][:, :, :t] - outs[1][:, :, :t]).abs().max())
        expect(gap <= 1e-12, late, f"changing tokens {t} and later moved an output before token {t} by {gap:.3g}: "
               f"o_i may read keys, values and gates of tokens j <= i only. Inside a chunk, mask the weights of "
               f"keys j > i to zero (mask the exponent to -inf before exp, so no inf · 0 appears)")
    return check(early, late, judge=judge)


@CHAPTER.task("9.5", "chunked_gated_retention", extend=True)
def chunked_gated_retention(f):
    """a data-dependent scalar gate in chunks: cumulative log-gates inside each chunk, a ragged last chunk"""
    q, k, v, la = rand(2, 3, 10, 4, seed=81), rand(2, 3, 10, 4, seed=82), rand(2, 3, 10, 4, seed=83), \
        log_gates(2, 3, 10, seed=84, shift=1.0)
    for chunk in (1, 3, 4, 10, 16):
        yield close(f(q, k, v, la, chunk), reference_95(q, k, v, la),
                    what=f"minilin.gated.recurrent_reference(q, k, v, log_decay=log_alpha, scale=1.0, "
                         f"return_state=True): (o, final state), N = 10, Dk = Dv = 4, chunk_size={chunk}")
    q2, k2, v2 = rand(3, 2, 13, 6, seed=85), rand(3, 2, 13, 6, seed=86), rand(3, 2, 13, 5, seed=87)
    la2, s0 = log_gates(3, 2, 13, seed=88), rand(3, 2, 6, 5, seed=89)
    yield close(f(q2, k2, v2, la2, 5, initial_state=s0), reference_95(q2, k2, v2, la2, s0),
                what="the reference with N = 13, Dk = 6, Dv = 5, an initial state and chunks of 5 (the last one of 3)")
    yield close(f(q2, k2, v2, torch.zeros_like(la2), 4, initial_state=s0),
                reference_95(q2, k2, v2, torch.zeros_like(la2), s0),
                what="log_alpha = 0 (gates wide open): plain causal linear attention from the initial state")
    # gates that close hard: e^-45 to e^-55 a token, about e^-800 across a chunk of 16 (exp(800) overflows float64)
    q3, k3, v3 = rand(2, 2, 32, 4, seed=90), rand(2, 2, 32, 4, seed=91), rand(2, 2, 32, 3, seed=92)
    la3 = -45.0 - 10.0 * torch.rand(2, 2, 32, generator=torch.Generator().manual_seed(93), dtype=torch.float64)
    la3[:, 1] = log_gates(2, 32, seed=94, shift=2.0)  # the second head keeps its memory
    s3 = rand(2, 2, 4, 3, seed=95)
    yield close(f(q3, k3, v3, la3, 16, initial_state=s3), reference_95(q3, k3, v3, la3, s3),
                what="the reference with log gates of -45 to -55 a token in one head, chunks of 16 (a chunk's "
                     "total decay about e^-800: its inverse overflows float64, so never form exp(-b_j) alone)")
    q4, k4, v4 = rand(1, 2, 12, 4, seed=96), rand(1, 2, 12, 4, seed=97), rand(1, 2, 12, 3, seed=98)
    la4, later = log_gates(1, 2, 12, seed=99), torch.arange(12) >= 7
    swap = [torch.where(later[:, None], rand(*x.shape, seed=100 + i), x) for i, x in enumerate((q4, k4, v4))]
    la4b = torch.where(later, log_gates(1, 2, 12, seed=104, shift=-2.0), la4)
    yield causal(f(q4, k4, v4, la4, 5), f(*swap, la4b, 5), 7)
    q5, k5, v5 = rand(2, 2, 32, 4, seed=105), rand(2, 2, 32, 4, seed=106), rand(2, 2, 32, 3, seed=107)
    yield no_square_intermediate(captured(f(q5, k5, v5, log_gates(2, 2, 32, seed=108, shift=2.0), 4),
                                          "matmul_shapes"), 2, 2, 32)
    q6, k6, v6 = rand(1, 2, 128, 4, seed=109), rand(1, 2, 128, 4, seed=110), rand(1, 2, 128, 3, seed=111)
    la6 = log_gates(1, 2, 128, seed=112, shift=2.0)
    yield work_in_chunks(captured(f(q6, k6, v6, la6, 8), "matmul_shapes"),
                         captured(f(q6, k6, v6, la6, 32), "matmul_shapes"), 128, 8, 32)
