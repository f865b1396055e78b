"""Checks for exercises/ex06_memory.py (Tasks 6.1-6.3), against minilin.bench's meters.

Task 6.1 restates notebook 06's saved-bytes formula for exact attention at any shape; 6.2 (the saved bytes of
Linformer, with E = F shared or not) and 6.3 (the length where a linear method's counted FLOPs fall below exact
attention's) are extend tasks: the chapter's idea on a case no notebook cell solves. Every expected value comes
from running minilin's own code under minilin.bench's meters on the meta device (shapes only, no data).
"""
import torch

from minilin.attention import softmax_attention
from minilin.grading.checks import Chapter, check, equal, expect, kind, raises
from minilin.linformer import linformer_attention

CHAPTER = Chapter(6, "ex06_memory", "memory and time")
DTYPES = {8: torch.float64, 4: torch.float32, 2: torch.bfloat16}  # bytes per number -> dtype


def _bench():
    """minilin.bench, imported only when chapter 6's checks are built: the grader imports only what it grades
    (the benchmark's package pulls in its command line)."""
    from minilin import bench
    return bench


def _meta(*shape, itemsize, grad=True):
    return torch.empty(*shape, device="meta", dtype=DTYPES[itemsize], requires_grad=grad)


def exact_saved(B, H, N, M, D, Dv, itemsize):
    """Bytes autograd keeps for backward of minilin.attention.softmax_attention, measured on meta tensors."""
    q, k, v = _meta(B, H, N, D, itemsize=itemsize), _meta(B, H, M, D, itemsize=itemsize), \
        _meta(B, H, M, Dv, itemsize=itemsize)
    return _bench().saved_tensor_bytes(softmax_attention, q, k, v)[0]


def linformer_saved(B, H, N, n, D, Dv, k, itemsize, shared):
    """The same for minilin.linformer.linformer_attention with fixed (k, n) projections (E is F when shared)."""
    q, keys, values = _meta(B, H, N, D, itemsize=itemsize), _meta(B, H, n, D, itemsize=itemsize), \
        _meta(B, H, n, Dv, itemsize=itemsize)
    E = _meta(k, n, itemsize=itemsize, grad=False)
    F = E if shared else _meta(k, n, itemsize=itemsize, grad=False)
    return _bench().saved_tensor_bytes(lambda a, b, c: linformer_attention(a, b, c, E, F), q, keys, values)[0]


METER = "minilin.bench.saved_tensor_bytes on meta tensors"


@CHAPTER.task("6.1", "exact_saved_bytes")
def exact_saved_bytes(f):
    """the bytes exact attention keeps for backward, at any shape and dtype"""
    cases = (((2, 3, 8, 8, 4, 4, 4), "self-attention N = M, D = Dv, float32"),
             ((2, 3, 5, 7, 4, 6, 8), "cross-attention N != M, D != Dv, float64"),
             ((3, 4, 6, 9, 3, 5, 2), "N != M, D != Dv, bfloat16 (2 bytes a number)"))
    for shape, name in cases:
        yield equal(f(*shape), exact_saved(*shape),
                    what=f"the bytes softmax_attention saves, {name}, (B, H, N, M, D, Dv, itemsize) = {shape} "
                         f"({METER})")


@CHAPTER.task("6.2", "linformer_saved_bytes", extend=True)
def linformer_saved_bytes(f):
    """the bytes Linformer keeps for backward, with separate or shared E = F"""
    cases = (((2, 3, 10, 10, 4, 4, 3, 4, False), "separate E, F, N = n, float32"),
             ((2, 3, 10, 10, 4, 4, 3, 4, True), "shared E = F, N = n, float32"),
             ((3, 2, 7, 12, 5, 3, 4, 8, True), "shared E = F, N != n, D != Dv, float64"),
             ((3, 2, 7, 12, 5, 3, 6, 8, False), "separate E, F, N != n, D != Dv, k = 6, float64"))
    for args, name in cases:
        yield equal(f(*args), linformer_saved(*args),
                    what=f"the bytes linformer_attention saves, {name}, (B, H, N, n, D, Dv, k, itemsize, shared) = "
                         f"{args} ({METER})")
    # sharing removes exactly one (k, n) matrix from what backward keeps
    args = (2, 4, 9, 11, 3, 6, 5, 8)
    separate, shared = f(*args, False), f(*args, True)
    expected = linformer_saved(*args, False) - linformer_saved(*args, True)

    def one_matrix_less(a, b):
        expect(type(a) is int and type(b) is int, separate, f"returned {kind(a)} and {kind(b)}, expected Python ints")
        expect(a - b == expected, separate, f"separate minus shared is {a - b} bytes, expected {expected} "
               f"(the meter's difference: the storage of the one projection that sharing removes)")
    yield check(separate, shared, judge=one_matrix_less)


def _flops(method, n, D, size):
    name = {"performer": "performer", "linear": "linear", "linformer": f"linformer-k{size}"}[method]
    bench = _bench()
    cfg = bench.BenchConfig(batch=2, heads=3, dim_head=D, nb_features=size or 16, device="cpu", progress=False)
    return bench.model_case(name, n, cfg)["model_flops_fwd"], bench.model_case("exact", n, cfg)["model_flops_fwd"]


@CHAPTER.task("6.3", "flop_crossover", extend=True)
def flop_crossover(f):
    """the shortest length at which a linear method counts fewer FLOPs than exact attention"""
    cases = (("performer", 8, 12), ("performer", 16, 32), ("linear", 8, None), ("linear", 16, None),
             ("linformer", 8, 12), ("linformer", 16, 5))
    for method, D, size in cases:
        call = f(method, D, size)

        def crossover(n, method=method, D=D, size=size, call=call):
            expect(type(n) is int and 2 <= n <= 100_000, call,  # every crossover here is below 100
                   f"returned {kind(n)}, expected a Python int from 2 to 100000")
            at, exact_at = _flops(method, n, D, size)
            before, exact_before = _flops(method, n - 1, D, size)
            where = f"counted forward FLOPs (minilin.bench.model_case, B = 2, H = 3, D = {D})"
            expect(at < exact_at, call, f"at n = {n} the method counts {at:,} FLOPs, exact attention {exact_at:,}: "
                   f"not fewer ({where})")
            expect(before >= exact_before, call, f"at n = {n - 1} the method already counts fewer, {before:,} against "
                   f"exact attention's {exact_before:,}: the crossover is shorter ({where})")
        yield check(call, judge=crossover)
    yield raises(f("exact", 8, None), "ValueError", why="for a method that is not one of the linear ones")
