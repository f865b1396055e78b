"""Checks for exercises/ex08_limits.py (Tasks 8.1-8.4), against minilin.attention and linformer and loop references.

Task 8.1 builds the effective Linformer map A F for per-head projections, shorter sequences, padding and slots that
hold no real position, checked against minilin.linformer.linformer_attention's output (the notebook computes A F
only for one unpadded model, through limits.effective_map); 8.2 (associative recall from a fixed-size
linear-attention state, exact for orthonormal keys and failing past p = D) and 8.3 (how sharp the scores of a
Linformer whose E = F select chosen positions must be to copy them to a tolerance) are extend tasks: the chapter's
idea on a case no notebook cell solves; 8.4 measures how many pairs a state of dimension D holds (predict, then
measure, over 50 draws). 8.2 and 8.4 are optional previews of notebook 09. Task 8.1's core is its first check and the
rank check (its fifth); the others test minilin's padding and empty-slot conventions.
"""
import itertools
import math
import statistics

import torch

from minilin.grading.checks import Chapter, Failure, check, close, equal, expect, expect_close, kind, rand
from minilin.linformer import linformer_attention

CHAPTER = Chapter(8, "ex08_limits", "where low rank fails", allowed=("minilin.attention.softmax_attention",))


def layer_map(q, keys, E, F, mask=None):
    """The (B, H, N, M) map minilin.linformer.linformer_attention applies to its values: its output when the values
    are the M one-hot vectors (a padded one zeroed by the layer, so a padded position's column is 0)."""
    B, H, M = keys.shape[:3]
    return linformer_attention(q, keys, torch.eye(M, dtype=keys.dtype).expand(B, H, M, M), E, F, mask=mask)


LAYER = "linformer_attention(q, k, v, E, F{}) with v the M one-hot vectors (the layer's map)"


@CHAPTER.task("8.1", "linformer_effective_map")
def linformer_effective_map(f):
    """Linformer's attention over the input positions, A F, rank at most k"""
    cases = (((2, 3, 7, 7, 4), 3, (3, 7), "E, F (k, n) shared by the heads, N = M = n, D = 4"),
             ((2, 3, 7, 7, 4), 3, (3, 3, 7), "E, F (H, k, n) one per head, D = 4"),
             ((3, 2, 5, 6, 2), 4, (4, 9), "M = 6 < n = 9 (the first M columns), N != M, D = 2"))
    for seed, ((b, h, n_q, m, d), k_len, e_shape, name) in enumerate(cases):
        q, keys = rand(b, h, n_q, d, seed=10 * seed + 1), rand(b, h, m, d, seed=10 * seed + 2)
        E, F = rand(*e_shape, seed=10 * seed + 3), rand(*e_shape, seed=10 * seed + 4)
        yield close(f(q, keys, E, F), layer_map(q, keys, E, F), what=f"{LAYER.format('')}, {name}")
    # padding: a padded key is out of every slot, and a padded value out of every slot's mix
    q, keys, E, F = rand(2, 3, 5, 4, seed=30), rand(2, 3, 6, 4, seed=31), rand(3, 8, seed=32), rand(3, 3, 8, seed=33)
    mask = torch.tensor([[True, True, True, True, False, False], [True, False, True, True, True, True]])
    yield close(f(q, keys, E, F, mask=mask), layer_map(q, keys, E, F, mask),
                what=f"{LAYER.format(', mask=mask')}, mask (2, 6), E (k, n), F (H, k, n)")
    # the map reproduces the layer, padding included: (A F) v is minilin.linformer.linformer_attention's output
    q, keys, v = rand(2, 2, 6, 3, seed=40), rand(2, 2, 8, 3, seed=41), rand(2, 2, 8, 5, seed=42)
    E, F = rand(2, 2, 8, seed=43), rand(2, 2, 8, seed=44)
    mask = torch.tensor([[True] * 8, [True] * 5 + [False] * 3])
    call = f(q, keys, E, F, mask=mask)
    out = linformer_attention(q, keys, v, E, F, mask=mask)

    def reproduces(P):
        expect(isinstance(P, torch.Tensor) and P.shape == (2, 2, 6, 8), call,
               f"returned {kind(P)}, expected a (2, 2, 6, 8) tensor")
        expect_close(P @ v, out, call=call, what="linformer_attention(q, k, v, E, F, mask=mask) (your map times v)")
        ranks = torch.linalg.matrix_rank(P.flatten(0, 1))
        expect(int(ranks.max()) <= 2, call, f"a map of rank {int(ranks.max())}, expected at most k = 2")
    yield check(call, judge=reproduces)
    # sparse E, F (pooling or selection rows, one set per head): a short sequence and padding leave slots whose E and
    # F rows weigh no real position; such a slot holds no token, and the layer keeps it out of the softmax
    support_E = torch.tensor([[[1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0, 0],    # head 0: windows of two;
                               [0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0, 1, 1]],   # slot 3's E is past M = 6
                              [[1, 0, 0, 0, 0, 1, 0, 0], [0, 1, 0, 0, 0, 0, 0, 0],    # head 1: scattered positions
                               [0, 0, 0, 1, 0, 0, 0, 1], [0, 0, 1, 0, 1, 0, 0, 0]]], dtype=torch.float64)
    support_F = support_E.clone()
    support_F[0, 3] = torch.tensor([0, 0, 0, 0, 0, 1, 1, 0], dtype=torch.float64)   # F reaches position 5: kept
    q, keys = rand(3, 2, 5, 3, seed=50), rand(3, 2, 6, 3, seed=51)
    E, F = rand(2, 4, 8, seed=52) * support_E, rand(2, 4, 8, seed=53) * support_F
    mask = torch.tensor([[True] * 6, [True, True, False, False, True, True], [False, False, True, True, True, False]])
    yield close(f(q, keys, E, F, mask=mask), layer_map(q, keys, E, F, mask),
                what=f"{LAYER.format(', mask=mask')}, E, F (H, k, n) zero outside a few positions per slot, M = 6 < "
                     "n = 8, mask (3, 6): some slots of some heads hold no real position")
    # a sequence with every position padded: no slot holds a token, and the layer gives zeros (never NaN)
    q, keys, E, F = rand(2, 2, 4, 3, seed=60), rand(2, 2, 5, 3, seed=61), rand(3, 5, seed=62), rand(3, 5, seed=63)
    mask = torch.tensor([[True, True, False, True, True], [False] * 5])
    yield close(f(q, keys, E, F, mask=mask), layer_map(q, keys, E, F, mask),
                what=f"{LAYER.format(', mask=mask')}, mask (2, 5) whose second sequence is all padding")


def unit_keys(b, h, p, d, seed):
    k = rand(b, h, p, d, seed=seed)
    return k / k.norm(dim=-1, keepdim=True)


def orthonormal_keys(b, h, p, d, seed):
    """p <= d orthonormal keys per head: the first p columns of a random orthogonal matrix."""
    return torch.linalg.qr(rand(b, h, d, d, seed=seed))[0][..., :p].transpose(-2, -1)


def readout_loop(k, v, q):
    """Σ_i (q_j · k_i) v_i, one query and one pair at a time."""
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=v.dtype)
    for b, h, j in itertools.product(*map(range, q.shape[:3])):
        for i in range(k.shape[2]):
            out[b, h, j] += float(q[b, h, j] @ k[b, h, i]) * v[b, h, i]
    return out


def crosstalk_loop(k, v):
    """Σ_{j≠i} (k_i · k_j) v_j for each stored key k_i: what the state adds to k_i's own (k_i · k_i) v_i."""
    out = torch.zeros_like(v)
    for b, h, i in itertools.product(*map(range, k.shape[:3])):
        for j in range(k.shape[2]):
            if j != i:
                out[b, h, i] += float(k[b, h, i] @ k[b, h, j]) * v[b, h, j]
    return out


def accuracy_loop(k, v):
    """The fraction of pairs whose readout k_i S is nearest (Euclidean) to v_i among the stored values."""
    readout = readout_loop(k, v, k)
    acc = torch.zeros(k.shape[:2], dtype=k.dtype)
    for b, h in itertools.product(*map(range, k.shape[:2])):
        for i in range(k.shape[2]):
            dist = [float((readout[b, h, i] - v[b, h, j]).norm()) for j in range(k.shape[2])]
            acc[b, h] += (min(range(len(dist)), key=dist.__getitem__) == i) / k.shape[2]
    return acc


@CHAPTER.task("8.2", "state_readout", "recall_accuracy", extend=True)
def state_recall(readout, accuracy):
    """associative recall from a fixed-size linear-attention state, and where it fails"""
    for seed, (b, h, p, d, dv) in enumerate(((2, 3, 4, 4, 3), (3, 2, 3, 6, 5))):
        k, v = orthonormal_keys(b, h, p, d, seed=80 + seed), rand(b, h, p, dv, seed=90 + seed)
        yield close(readout(k, v, k), v, atol=1e-12,
                    what=f"the stored values (orthonormal keys, p = {p} <= D = {d}, Dv = {dv}): exact recall")
        yield close(accuracy(k, v), torch.ones(b, h, dtype=k.dtype), dtype=False,
                    what=f"accuracy 1 for every head (orthonormal keys, p = {p} <= D = {d})")
    for seed, (b, h, p, n_q, d, dv) in enumerate(((2, 3, 9, 5, 4, 3), (3, 2, 5, 7, 6, 2))):
        k, v, q = unit_keys(b, h, p, d, 100 + seed), rand(b, h, p, dv, seed=110 + seed), rand(b, h, n_q, d, seed=120)
        yield close(readout(k, v, q), readout_loop(k, v, q),
                    what=f"Σ_i (q_j · k_i) v_i by a loop, p = {p}, Q = {n_q}, D = {d}, Dv = {dv}")
        call = readout(k, v, k)
        expected = crosstalk_loop(k, v)

        def crosstalk(got, k=k, v=v, expected=expected, call=call):
            expect(isinstance(got, torch.Tensor) and got.shape == v.shape, call,
                   f"returned {kind(got)}, expected a {tuple(v.shape)} tensor")
            own = (k * k).sum(-1, keepdim=True) * v
            expect_close(got - own, expected, call=call, what="the crosstalk Σ_{j≠i} (k_i · k_j) v_j by a loop "
                         "(your readout at k_i minus (k_i · k_i) v_i)")
        yield check(call, judge=crosstalk)
    # past p = D the keys crowd each other: on a fixed seed the accuracy falls as p grows
    d, dv = 8, 8
    accs = []
    for p in (4, 8, 16, 32):
        k, v = unit_keys(2, 2, p, d, 130 + p), rand(2, 2, p, dv, seed=140 + p)
        accs.append(accuracy_loop(k, v))
        yield close(accuracy(k, v), accs[-1], dtype=False,
                    what=f"the recalled fraction by a loop (random unit keys, p = {p}, D = {d}, Dv = {dv})")
    assert float(accs[0].mean()) > float(accs[-1].mean()), "grader: the seeds no longer show the fall"


def copy_reference(v, positions, sharpness):
    """Linformer with E = F selecting `positions`, one-hot keys there, and queries sharpness·√k·e_j."""
    B, H, M, _ = v.shape
    k = len(positions)
    E = torch.zeros(k, M, dtype=v.dtype)
    E[torch.arange(k), torch.tensor(positions)] = 1.0
    keys = torch.zeros(B, H, M, k, dtype=v.dtype)
    keys[:, :, torch.tensor(positions), torch.arange(k)] = 1.0  # key at positions[i] is e_i
    q = (sharpness * math.sqrt(k) * torch.eye(k, dtype=v.dtype)).expand(B, H, k, k)
    return linformer_attention(q, keys, v, E, E)


def sharpness_by_bisection(v, positions, tol):
    """The smallest s >= 0 at which copy_reference is within tol of v[..., positions, :], by bisection on the
    layer itself (its error falls as s grows), to 1e-10."""
    error = lambda s: float((copy_reference(v, positions, s) - v[:, :, positions]).abs().max())
    if error(0.0) <= tol:
        return 0.0
    low, high = 0.0, 1.0
    while error(high) > tol:
        low, high = high, 2 * high
    while high - low > 1e-10:
        mid = (low + high) / 2
        low, high = (low, mid) if error(mid) <= tol else (mid, high)
    return high


@CHAPTER.task("8.3", "copy_sharpness", extend=True)
def copy_sharpness(f):
    """how sharp a Linformer's scores must be to copy chosen positions to a tolerance"""
    cases = (((2, 3, 9, 4), [5, 1, 7], 1e-3, "3 slots of 9, tol 1e-3"),
             ((3, 2, 6, 2), [4, 3, 2, 0], 1e-6, "4 slots of 6, tol 1e-6"),
             ((1, 2, 40, 3), list(range(0, 40, 2)), 1e-2, "20 slots of 40, tol 1e-2"),
             ((2, 2, 70, 2), list(range(69, 5, -1)), 1e-4, "64 slots of 70 in reverse order, tol 1e-4"),
             ((2, 2, 7, 3), [6, 2], 10.0, "2 slots, tol 10: sharpness 0 already meets it"))
    for seed, (shape, positions, tol, name) in enumerate(cases):
        v = rand(*shape, seed=60 + seed)
        yield close(f(v, positions, tol), sharpness_by_bisection(v, positions, tol), atol=1e-6,
                    what=f"the smallest s by bisection on the copying layer's largest error, {name}")


def held_loop(k, v, threshold):
    """The largest p whose every prefix recalls at least `threshold` of its pairs, one pair and prefix at a time."""
    held = 0
    for p in range(1, k.shape[0] + 1):
        hits = 0
        for i in range(p):
            readout = sum(float(k[i] @ k[j]) * v[j] for j in range(p))
            dist = [float((readout - v[j]).norm()) for j in range(p)]
            hits += min(range(p), key=dist.__getitem__) == i
        if hits / p < threshold:
            break
        held = p
    return held


def held_by_prefix(k, v, threshold):
    """held_loop's rule, each prefix as tensors (tests/exercises checks it against the loop)."""
    held = 0
    for p in range(1, k.shape[0] + 1):
        nearest = torch.cdist(k[:p] @ (k[:p].T @ v[:p]), v[:p]).argmin(dim=-1)
        if (nearest == torch.arange(p)).to(k.dtype).mean() < threshold:
            break
        held = p
    return held


@CHAPTER.task("8.4", "pairs_held")
def pairs_held(f):
    """predict, then measure: how many pairs a state of dimension D gives back"""
    # orthonormal keys first: every prefix up to D is exact, so the answer is at least D
    d = 4
    keys = torch.cat([torch.linalg.qr(rand(d, d, seed=150))[0].T, unit_keys(1, 1, 8, d, 151)[0, 0]])
    values = rand(12, 3, seed=152)
    yield equal(f(keys, values, 0.9), held_loop(keys, values, 0.9),
                what="the largest p by a loop (4 orthonormal keys, then 8 random unit keys, D = 4, threshold 0.9)")
    for seed, (p, d, dv, threshold) in enumerate(((20, 4, 4, 0.9), (24, 8, 6, 0.75), (30, 6, 6, 1.0), (16, 3, 5, 0.5))):
        keys, values = unit_keys(1, 1, p, d, 160 + seed)[0, 0], rand(p, dv, seed=170 + seed)
        yield equal(f(keys, values, threshold), held_loop(keys, values, threshold),
                    what=f"the largest p by a loop (random unit keys, P = {p}, D = {d}, Dv = {dv}, threshold {threshold})")
    # the docstring's measurement: 50 draws of 64 unit keys, D = 16; one draw alone ranges from about 3 to 22
    draws = []
    for s in range(50):
        g = torch.Generator().manual_seed(s)
        keys = torch.nn.functional.normalize(torch.randn(64, 16, generator=g, dtype=torch.float64), dim=-1)
        draws.append((keys, torch.randn(64, 16, generator=g, dtype=torch.float64)))
    spread = lambda held: (statistics.median(held), min(held), max(held))
    expected = spread([held_by_prefix(keys, values, 0.9) for keys, values in draws])
    call = f.each([((keys, values, 0.9), {}) for keys, values in draws],
                  label="pairs_held on the docstring's 50 draws (64 random unit keys, D = Dv = 16, threshold 0.9)")

    def judge(got):
        if spread(got) != expected:
            raise Failure(f"{call.describe()}\n  median, min, max {spread(got)}; expected {expected}")
    yield check(call, judge=judge)
    # a first pair that cannot be recalled: two pairs with the same key and different values never pass at p = 2
    keys, values = unit_keys(1, 1, 1, 5, 180)[0, 0].repeat(6, 1), rand(6, 2, seed=181)
    yield equal(f(keys, values, 0.9), held_loop(keys, values, 0.9),
                what="the largest p by a loop (one key repeated: only p = 1 can pass)")
