"""Checks for exercises/ex05_peers.py (Tasks 5.1-5.5), against minilin.efficient, minilin.model and the peers."""
import copy
import importlib

import torch

from minilin.grading.checks import CannotGrade, Chapter, captured, check, close, equal, expect, expect_close, rand
from minilin.grading.ex04_performer import no_future_leak

CHAPTER = Chapter(5, "ex05_peers", "efficient attention, weight transplants, FLOPs")
MASK = torch.tensor([[True, False, True, True, True, False, True], [False] * 7])


def peer(module):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise CannotGrade(f"{module} is not installed (pip install -e \".[course]\"): {err}") from None


@CHAPTER.task("5.1", "efficient_attention")
def efficient_attention(f):
    """Shen et al.'s efficient attention with a padding mask"""
    from minilin.efficient import efficient_attention as reference
    q, k, v = rand(2, 3, 5, 4, seed=1), rand(2, 3, 7, 4, seed=2), rand(2, 3, 7, 3, seed=3)
    yield close(f(q, k, v, mask=MASK), reference(q, k, v, mask=MASK),
                what="minilin.efficient.efficient_attention(q, k, v, mask=mask); sequence 2 has no real key: zeros")
    yield close(f(q, k * 50.0, v), reference(q, k * 50.0, v), what="the reference with keys x 50 (stability)")
    yield close(f(q, k, v), reference(q, k, v), what="minilin.efficient.efficient_attention(q, k, v)")


@CHAPTER.task("5.2", "causal_efficient_attention")
def causal_efficient_attention(f):
    """the causal, bucketed variant by prefix sums"""
    from minilin.efficient import efficient_attention as reference
    q, k, v = rand(2, 2, 8, 4, seed=4), rand(2, 2, 8, 4, seed=5), rand(2, 2, 8, 3, seed=6)
    for bucket in (1, 2, 4):
        yield close(f(q, k, v, bucket_size=bucket), reference(q, k, v, causal=True, bucket_size=bucket),
                    what=f"minilin.efficient.efficient_attention(q, k, v, causal=True, bucket_size={bucket})")
        yield no_future_leak(f, lambda x: (x, x, x), rand(1, 2, 8, 4, seed=7), "q, k and v", bucket_size=bucket)


def _seeded(seed, build):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build()


@CHAPTER.task("5.3", "transplant_into_lat")
def transplant_into_lat(f):
    """our EfficientSelfAttention's weights into linear-attention-transformer"""
    from minilin.efficient import EfficientSelfAttention
    lat_module = peer("linear_attention_transformer.linear_attention_transformer")
    ours = _seeded(0, lambda: EfficientSelfAttention(24, heads=3).double())
    lat = _seeded(1, lambda: lat_module.SelfAttention(24, 3).double())
    call = captured(f(ours, lat), "module:1")  # send back lat's state_dict after the transplant
    x = rand(2, 10, 24, seed=8)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[0, 7:] = False

    def judge(got):
        filled = load_state(call, lat, got)
        with torch.no_grad():
            expect_close(filled(x), ours(x), call=call, what="ours(x), with lat given the returned weights")
            expect_close(filled(x, input_mask=mask), ours(x, mask=mask), call=call,
                         what="ours(x, mask=mask) (padding mask)")
    yield check(call, judge=judge)


def load_state(call, module, got):
    """A fresh copy of the grader's `module` holding the state the learner's function left in it."""
    expect(isinstance(got, dict) and got.get("returned_input") is True, call,
           "must return the module it was given (modified in place), not a new one")
    filled = copy.deepcopy(module)
    try:
        filled.load_state_dict(got["state"], strict=True)
    except (RuntimeError, TypeError, KeyError) as err:
        expect(False, call, f"the module's weights cannot be loaded back: {str(err).splitlines()[0]}")
    return filled


@CHAPTER.task("5.4", "linformer_into_ours")
def linformer_into_ours(f):
    """a `linformer` LinformerSelfAttention's weights into ours"""
    from minilin.linformer import LinformerSelfAttention
    linformer = peer("linformer")
    theirs = _seeded(1, lambda: linformer.LinformerSelfAttention(dim=24, seq_len=16, k=4, heads=3).double())
    ours = _seeded(2, lambda: LinformerSelfAttention(24, heads=3, seq_len=16, proj_len=4, sharing="headwise").double())
    call = captured(f(theirs, ours), "module:1")

    def judge(got):
        filled = load_state(call, ours, got)
        with torch.no_grad():
            for n in (16, 11):  # shorter inputs use the first n columns of E, F on both sides
                x = rand(2, n, 24, seed=9 + n)
                expect_close(filled(x), theirs(x), call=call, what=f"theirs(x) for x (2, {n}, 24)")
    yield check(call, judge=judge)


@CHAPTER.task("5.5", "block_flops")
def block_flops(f):
    """FLOPs of one Transformer block from first principles"""
    from minilin.bench import flop_counter
    from minilin.model import Block, LMConfig

    def counted(proj_len, heads):
        config = LMConfig(dim=48, heads=heads, depth=1, causal=False, block_size=32,
                          attention="exact" if proj_len is None else "linformer", proj_len=proj_len or 8)
        block = _seeded(0, lambda: Block(config, 0))  # tiny CPU tensors: counting on "meta" costs seconds of setup
        with torch.no_grad(), flop_counter() as counter:
            block(torch.zeros(2, 32, 48), causal=False)
        return counter.get_total_flops()

    for proj_len in (None, 8):
        total = counted(proj_len, heads=4)
        assert counted(proj_len, heads=8) == total  # the count does not depend on the number of heads
        yield equal(f(2, 32, 48, proj_len=proj_len), total,
                    what=f"FlopCounterMode on minilin.model.Block (proj_len={proj_len})")
        call, smaller = f(2, 32, 48, proj_len=proj_len), f(2, 32, 48, proj_len=proj_len, ff_mult=2)
        yield check(call, smaller, judge=lambda a, b, smaller=smaller: expect(
            type(b) is int and type(a) is int and b < a, smaller, f"{b!r} FLOPs with ff_mult=2, expected fewer "
                                                                  f"than the {a!r} with ff_mult=4"))
