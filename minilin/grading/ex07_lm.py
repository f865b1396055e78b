"""Checks for exercises/ex07_lm.py (Tasks 7.1-7.10), against minilin.model, minilin.efficient, TinyLM's decoding
states (7.9), minilin.linear on shifted keys and values (7.10), and loops written here (7.1, 7.2, 7.5, 7.7)."""
import dataclasses
import math

import torch

from minilin.grading.calls import Gen, Raised, Scratch, Unpicklable
from minilin.grading.checks import (Chapter, Fn, check, close, compare, equal, expect, expect_close, expecting, gen,
                                    kind, rand)

CHAPTER = Chapter(7, "ex07_lm", "the pieces of a byte-level LM's training loop, and decoding")
TOL = 1e-6  # float32 cross-entropy of O(1) values summed over ~100 terms: round-off ~1e-7 relative; a loss
# near 10 is itself ~1e-6 from the next float32, so the loss checks allow TOL relative too (fresh draws found it)
IGNORE, MASK_ID = -100, 256


def truncate_loop(text, budget):
    """Whole characters, one at a time, while they fit in the budget: the prefix's UTF-8 bytes."""
    out = b""
    for ch in text:
        if len(out) + len(ch.encode("utf-8")) > budget:
            break
        out += ch.encode("utf-8")
    return torch.tensor(list(out), dtype=torch.long)


@CHAPTER.task("7.1", "truncate_utf8")
def truncate_utf8(f):
    """the longest prefix within a byte budget that cuts no character"""
    pool = "ab é✓日本🙂\n"
    drawn = "".join(pool[i] for i in torch.randint(len(pool), (12,), generator=gen(11)).tolist())
    for text in ["hello", "naïve café ✓ 日本語", "🙂 emoji 🙂", drawn]:
        ids = torch.tensor(list(text.encode("utf-8")), dtype=torch.long)
        budgets = list(range(len(ids) + 3))
        call = f.each([((ids, b), {}) for b in budgets], label=f"truncate_utf8(the bytes of {text!r}, b) for b = "
                                                               f"0..{len(ids) + 2}")
        yield equal(call, [truncate_loop(text, b) for b in budgets],
                    what="whole characters added one at a time while they fit")


def documents_loop(window, eos):
    inputs, targets = window[:, :-1].clone(), window[:, 1:].clone()
    for b in range(window.shape[0]):
        for t in range(inputs.shape[1]):
            if int(inputs[b, t]) == eos:
                targets[b, t] = IGNORE
    return inputs, targets


@CHAPTER.task("7.2", "shift_with_documents")
def shift_with_documents(f):
    """next-byte targets for packed documents: no loss on a document's first byte"""
    for seed, (B, L, eos) in enumerate(((3, 8, 0), (1, 5, 3), (5, 1, 0), (2, 33, 5))):
        window = torch.randint(6, (B, L + 1), generator=gen(20 + seed))   # six byte values: eos is frequent
        window[0, 0], window[-1, -1] = eos, eos                          # at the start and at the end
        yield equal(f(window, eos), documents_loop(window, eos),
                    what=f"the shift with IGNORE after each eos = {eos}, a ({B}, {L + 1}) window")
    window = torch.randint(4, (4, 17), generator=gen(25))
    twice = f.each([((window, 0), {})] * 2, label="shift_with_documents(window, 0) twice on the same tensor")
    yield equal(twice, [documents_loop(window, 0)] * 2,
                what="the same result twice (the first call must not modify the window)")


@CHAPTER.task("7.3", "lm_loss")
def lm_loss_ignoring(lm_loss):
    """the LM loss with ignored targets"""
    from minilin.model import lm_loss as reference
    for seed, (B, L, V) in enumerate(((2, 7, 256), (3, 5, 11))):
        logits = torch.randn(B, L, V, generator=gen(1 + seed)) * 3
        targets = torch.randint(V, (B, L), generator=gen(2 + seed))
        yield close(lm_loss(logits, targets), reference(logits, targets), atol=TOL, rtol=TOL,
                    what=f"minilin.model.lm_loss, every target kept, logits ({B}, {L}, {V})")
        targets = targets.clone()
        targets[0, :3] = IGNORE
        targets[-1, -1] = IGNORE
        yield close(lm_loss(logits, targets), reference(logits, targets), atol=TOL, rtol=TOL,
                    what=f"minilin.model.lm_loss with ignored targets (mean over the kept ones), V = {V}")
    yield close(lm_loss(torch.zeros(1, 4, 256), torch.tensor([[1, 2, IGNORE, 3]])), torch.tensor(math.log(256)),
                atol=TOL, what="ln 256 for uniform logits")


def _pairs(call, got, shape):
    ok = isinstance(got, (tuple, list)) and len(got) == 2 and all(
        isinstance(t, torch.Tensor) and tuple(t.shape) == shape for t in got)
    expect(ok, call, f"returned {kind(got)}, expected (corrupted, targets), two tensors of shape {shape}")
    return got


def _within(call, share, p, n, what):
    bound = 4 * math.sqrt(p * (1 - p) / n)
    expect(abs(share - p) < bound, call, f"{share:.4f} of {what}, expected {p:.4f} ± {bound:.4f} (4 standard errors)")


@CHAPTER.task("7.4", "mask_for_mlm", extend=True)
def mask_for_mlm(f):
    """BERT's 80/10/10 masked-LM corruption"""
    # 64 x 256 = 16384 positions (and 40 x 100 at 0.3); bounds are 4 binomial standard errors
    tokens = torch.randint(256, (64, 256), generator=gen(3))
    shape = tuple(tokens.shape)
    first = f(tokens, generator=Gen(0), mask_prob=0.15)

    def parts(call, got):
        corrupted, targets = _pairs(call, got, shape)
        return corrupted, targets, targets != IGNORE

    def selection(got):
        _, _, selected = parts(first, got)
        _within(first, selected.float().mean().item(), 0.15, tokens.numel(), "the positions selected")
    yield check(first, judge=selection)

    def targets_and_rest(got):
        corrupted, targets, selected = parts(first, got)
        expect_close(targets[selected], tokens[selected], call=first, what="the original bytes at selected positions")
        expect_close(corrupted[~selected], tokens[~selected], call=first, what="the input at unselected positions")
        expect(bool(((corrupted >= 0) & (corrupted <= MASK_ID)).all()), first, "ids outside 0..256")
    yield check(first, judge=targets_and_rest)

    def eighty_ten_ten(got):
        corrupted, _, selected = parts(first, got)
        k = int(selected.sum())
        _within(first, (corrupted[selected] == MASK_ID).float().mean().item(), 0.8, k, "the selected positions MASK_ID")
        _within(first, (corrupted[selected] == tokens[selected]).float().mean().item(), 0.1 + 0.1 / 256, k,
                "the selected positions keeping their byte (0.1, plus random bytes that hit it)")
    yield check(first, judge=eighty_ten_ten)

    def random_bytes(got):
        corrupted, _, selected = parts(first, got)
        swapped = selected & (corrupted != MASK_ID) & (corrupted != tokens)
        values = corrupted[swapped]
        distinct = len(set(values.tolist()))
        # ~245 uniform draws of 256 bytes give ~157 distinct values; one constant byte gives 1
        expect(distinct >= 100, first, f"the {values.numel()} replaced bytes take only {distinct} distinct values: "
                                       "the 10% must be uniformly random bytes (0..255), one draw per position")
        expect(bool((values < 256).all()), first, "a random replacement is not a byte (0..255)")
    yield check(first, judge=random_bytes)

    again = f(tokens, generator=Gen(0), mask_prob=0.15)
    yield check(first, again, judge=lambda a, b: expect_close(
        parts(again, b)[0], parts(first, a)[0], call=again, what="the first result with the same seed (use the "
                                                                  "generator for every draw)"))
    twice = f.each([((tokens,), dict(generator=Gen(5), mask_prob=0.15))] * 2,
                   label="mask_for_mlm(tokens, ...) twice on the same tensor, the same seed")

    def unchanged(got):
        expect(isinstance(got, list) and len(got) == 2, twice, f"returned {kind(got)}")
        targets = [parts(twice, r)[1] for r in got]
        selected = targets[1] != IGNORE
        expect_close(targets[1][selected], tokens[selected], call=twice,
                     what="the original bytes, on the second call: the first call modified its input tensor "
                          "(corrupt a copy)")
    yield check(twice, judge=unchanged)
    other = torch.randint(256, (40, 100), generator=gen(4))
    half = f(other, generator=Gen(1), mask_prob=0.3)

    def rate(got):
        _, targets = _pairs(half, got, tuple(other.shape))
        _within(half, (targets != IGNORE).float().mean().item(), 0.3, other.numel(), "the positions selected")
    yield check(half, judge=rate)


def wsd_loop(step, *, lr, steps, warmup, decay, min_lr):
    """Warm-up, stable, decay, written as three ranges."""
    if step >= steps:
        return float(min_lr)
    if step in range(warmup):
        return lr * (step + 1) / warmup
    if step in range(warmup, steps - decay + 1):
        return float(lr)
    return lr + (min_lr - lr) * (step - steps + decay) / decay


@CHAPTER.task("7.5", "wsd_lr")
def wsd_lr(f):
    """warm-up, stable, then linear decay"""
    for kw in (dict(lr=3e-3, steps=200, warmup=20, decay=40, min_lr=3e-4),
               dict(lr=1.0, steps=37, warmup=5, decay=10, min_lr=0.1),
               dict(lr=0.5, steps=12, warmup=0, decay=4, min_lr=0.0),
               dict(lr=0.2, steps=10, warmup=3, decay=0, min_lr=0.05)):
        last = kw["steps"] + 5  # past the last step the rate stays at min_lr
        call = f.each([((s,), kw) for s in range(last + 1)],
                      label=f"wsd_lr(step, {', '.join(f'{k}={v}' for k, v in kw.items())}) for step = 0..{last}")
        yield close(call, [wsd_loop(s, **kw) for s in range(last + 1)], atol=0.0, rtol=1e-12,
                    what="the schedule written as three ranges, at every step")


@CHAPTER.task("7.6", "save_checkpoint", "load_checkpoint", extend=True)
def checkpoint(save, load):
    """atomic checkpoint saving and weights-only loading"""
    state = {"model": {"w": torch.arange(6.0).view(2, 3)}, "step": 7, "history": [5.5, 4.25]}
    ckpt, evil = Scratch("ckpt.pt"), Scratch("evil.pt")
    saved = dataclasses.replace(save(state, ckpt), label="save_checkpoint(state, 'ckpt.pt')")
    listdir = dataclasses.replace(Fn("@listdir")(Scratch("")), label="the files in the folder after a failed save")
    yield check(saved, load(ckpt), judge=lambda _, back: expect_close(back, state, call=saved, what="the saved state"))
    calls = (saved, expecting(save(Unpicklable(), ckpt), "PicklingError", "AttributeError", "TypeError"),
             load(ckpt), listdir)

    def judge(_, failed, again, files):
        expect(isinstance(failed, Raised), calls[1], "an object that cannot be pickled must raise (and leave no "
                                                    "partial file behind)")
        problem = compare(again, state) if isinstance(again, dict) else f"returned {kind(again)}"
        expect(problem is None, calls[2], "after a failed save the previous checkpoint must still load (write to a "
                                          f"temporary file, then os.replace): {problem}")
        expect(files == ["ckpt.pt"], calls[3], f"the folder holds {files}; expected only ckpt.pt (remove the "
                                               "temporary file when saving fails)")
    yield check(*calls, judge=judge)
    spied = dataclasses.replace(load(ckpt), capture="load_kwargs", label="load_checkpoint('ckpt.pt')")

    def judge_kwargs(_, got):
        seen = got.get("calls") if isinstance(got, dict) else None
        expect(bool(seen), spied, "torch.load was never called: load the file with torch.load")
        expect(all(c["weights_only"] is True for c in seen), spied, f"torch.load got weights_only="
               f"{[c['weights_only'] for c in seen]}: pass weights_only=True (the default was False before PyTorch "
               "2.6; only the argument makes the load safe on every version)")
        expect(all(c["map_location"] == "cpu" for c in seen), spied, f"torch.load got map_location="
               f"{[c['map_location'] for c in seen]}: pass map_location='cpu' (a file saved on a GPU then loads "
               "on a machine without one)")
        expect_close(got.get("value"), state, call=spied, what="the state loaded through the spied torch.load")
    yield check(saved, spied, judge=judge_kwargs)
    refused = expecting(load(evil), "UnpicklingError")
    yield check(Fn("@write_unsafe_pickle")(evil), refused, judge=lambda _, got: expect(
        isinstance(got, Raised), refused, "loaded a pickled arbitrary object: load with weights only"))


def nucleus_loop(logits, top_p):
    """Row by row: keep the likeliest tokens until their probabilities sum to >= top_p; the rest -inf."""
    out = torch.full_like(logits, float("-inf"))
    flat, kept = logits.reshape(-1, logits.shape[-1]), out.view(-1, logits.shape[-1])
    for r in range(flat.shape[0]):
        p = torch.softmax(flat[r], dim=-1).tolist()
        total = 0.0
        for j in sorted(range(len(p)), key=lambda j: -p[j]):
            kept[r, j] = flat[r, j]
            total += p[j]
            if total >= top_p:
                break
    return out


@CHAPTER.task("7.7", "top_p_filter", extend=True)
def top_p_filter(f):
    """nucleus (top-p) filtering of next-byte logits"""
    cases = [((3, 10), 1.0, 0.5), ((2, 257), 3.0, 0.9), ((2, 3, 17), 2.0, 0.75)]  # shape, logit scale, top_p
    for seed, (shape, scale, top_p) in enumerate(cases):
        logits = rand(*shape, seed=60 + seed, scale=scale)
        yield equal(f(logits, top_p), nucleus_loop(logits, top_p),
                    what=f"a loop over each row's tokens, likeliest first, logits {shape}, top_p = {top_p}")
    logits = rand(4, 12, seed=64)
    yield equal(f(logits, 1e-9), nucleus_loop(logits, 1e-9), what="top_p = 1e-9: only each row's likeliest token")
    yield equal(f(logits, 1.0), logits, what="top_p = 1: every token kept, logits unchanged")


@CHAPTER.task("7.8", "efficient_decode_step", extend=True)
def efficient_decode_step(f):
    """one decoding step of causal efficient attention with a constant-size state"""
    from minilin.efficient import efficient_attention

    for seed, (B, H, N, D, Dv) in enumerate(((2, 3, 10, 4, 3), (3, 2, 7, 6, 5))):
        q, k, v = (rand(B, H, N, d, seed=70 + 3 * seed + i) for i, d in enumerate((D, D, Dv)))
        parallel = efficient_attention(q, k, v, causal=True)  # (B, H, N, Dv)
        S = torch.einsum("bhnd,bhne->bhnde", k.exp(), v).cumsum(dim=2)  # state after each position
        z = k.exp().cumsum(dim=2)
        for t in (0, 3, N - 1):
            state = None if t == 0 else (S[:, :, t - 1], z[:, :, t - 1])
            call = f(q[:, :, t], k[:, :, t], v[:, :, t], state)
            where = f"position {t} of {N} (B {B}, H {H}, D {D}, Dv {Dv}), " + ("no state yet" if t == 0 else
                                                                                "the state after the earlier tokens")
            yield check(call, judge=lambda got, call=call, t=t, where=where, parallel=parallel: expect_close(
                got[0] if isinstance(got, (tuple, list)) and len(got) == 2 else got, parallel[:, :, t], call=call,
                what=f"the output of minilin.efficient.efficient_attention(causal=True) at {where}"))
            yield check(call, judge=lambda got, call=call, t=t, where=where, S=S, z=z: expect_close(
                tuple(got[1]) if isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(
                    got[1], (tuple, list)) else got, (S[:, :, t], z[:, :, t]), call=call,
                what=f"the new state (S, z) = (Σ_(j<=t) exp(k_j) v_jᵀ, Σ_(j<=t) exp(k_j)) at {where}"))


def measured_crossover(heads, head_dim, features):
    """From TinyLM's own decoding states after one token: the cache's numbers per token (exact attention) and the
    state's S and z (Performer with m = features, or elu+1 when features == head_dim; minilin's extra log_scale, a
    stabiliser that elu+1 leaves at 0, is not the RNN state of Katharopoulos et al.); the first t with more."""
    from minilin.model import LMConfig, TinyLM
    config = LMConfig(dim=heads * head_dim, heads=heads, depth=1, positions="rope", block_size=8)
    held = {}
    for attention in ("exact", "linear" if features == head_dim else "performer"):
        model = TinyLM(dataclasses.replace(config, attention=attention, nb_features=features)).eval()
        with torch.no_grad():
            _, state = model.step(torch.tensor([1]), None)
        layer = state["layers"][0]
        held[attention] = (layer["k"].numel() + layer["v"].numel() if attention == "exact"
                           else layer.kv.numel() + layer.z.numel())
    per_token, state_numbers = held.pop("exact"), held.popitem()[1]
    return state_numbers // per_token + 1


@CHAPTER.task("7.9", "predicted_crossover")
def predicted_crossover(f):
    """the context at which a key/value cache outgrows a linear-attention state (predicted, then measured)"""
    g = gen(90)
    cases = [(4, 16, 16), (8, 64, int(64 * math.log(64))), (1, 4, 8)]   # (1, 4, 8): a tie, 40 = 5 · 8 numbers
    while len(cases) < 8:
        heads, head_dim = int(torch.randint(1, 9, (1,), generator=g)), 4 * int(torch.randint(1, 17, (1,), generator=g))
        features = head_dim if len(cases) % 3 == 0 else int(torch.randint(1, 300, (1,), generator=g))
        cases.append((heads, head_dim, features))
    for heads, head_dim, features in cases:
        yield equal(f(heads, head_dim, features), measured_crossover(heads, head_dim, features),
                    what=f"the crossover measured on TinyLM's decoding states (heads {heads}, head_dim {head_dim}, "
                         f"{features} features)")


def shifted_reference(q, k, v, mu):
    """Token shift, then minilin's causal elu+1 linear attention: k'_t = mu·k_t + (1 - mu)·k_{t-1} and v'_t alike
    (zeros before position 0); mu a float or a (H,) tensor. (B, H, N, D) -> (B, H, N, D)"""
    from minilin.linear import elu_plus_one, linear_attention
    mu = mu.reshape(1, -1, 1, 1) if isinstance(mu, torch.Tensor) else mu
    before = lambda t: torch.nn.functional.pad(t, (0, 0, 1, 0))[:, :, :-1]
    k, v = (mu * t + (1 - mu) * before(t) for t in (k, v))
    return linear_attention(q, k, v, feature_map=elu_plus_one, causal=True)


@CHAPTER.task("7.10", "shifted_linear_mix", extend=True)
def shifted_linear_mix(f):
    """token shift: causal elu+1 linear attention on keys and values mixed with the previous position's"""
    from minilin.linear import elu_plus_one, linear_attention
    what = "minilin.linear.linear_attention(feature_map=elu_plus_one, causal=True) on k' = mu·k_t + (1 - mu)·k_(t-1)"\
           " and v' alike (zeros before position 0)"
    for seed, (B, H, N, D) in enumerate(((2, 4, 9, 5), (1, 3, 17, 8))):
        q, k, v = (rand(B, H, N, D, seed=100 + 3 * seed + i) for i in range(3))
        per_head = torch.linspace(0, 1, H, dtype=torch.float64)
        yield close(f(q, k, v, 0.3), shifted_reference(q, k, v, 0.3), what=f"{what}, mu = 0.3, ({B}, {H}, {N}, {D})")
        yield close(f(q, k, v, per_head), shifted_reference(q, k, v, per_head),
                    what=f"{what}, mu per head = ({', '.join(f'{m:.3g}' for m in per_head.tolist())}), "
                         f"({B}, {H}, {N}, {D})")
    q, k, v = (rand(2, 2, 6, 4, seed=110 + i) for i in range(3))
    yield close(f(q, k, v, 1.0), linear_attention(q, k, v, feature_map=elu_plus_one, causal=True),
                what="mu = 1: plain causal elu+1 linear attention (minilin.linear.linear_attention), no shift")
    yield close(f(q, k, v, 0.0), shifted_reference(q, k, v, 0.0),
                what="mu = 0: linear attention on the previous position's keys and values only (zeros at 0)")
    B, H, N, D, t0, mu = 2, 4, 12, 6, 7, 0.6
    q, k, v = (rand(B, H, N, D, seed=120 + i) for i in range(3))
    k2, v2 = k.clone(), v.clone()
    k2[:, :, t0] += 1
    v2[:, :, t0] += 1
    calls = (f(q, k, v, mu), f(q, k2, v2, mu))

    def causal(before, after):
        for call, got in zip(calls, (before, after)):
            expect(isinstance(got, torch.Tensor) and tuple(got.shape) == (B, H, N, D), call,
                   f"returned {kind(got)}, expected a tensor of shape {(B, H, N, D)}")
            expect(bool(got.isfinite().all()), call, "returned NaN or inf for finite inputs")
        expect_close(after[..., :t0, :], before[..., :t0, :], call=calls[1], atol=1e-12,
                     what=f"the outputs before position {t0} with the key and value at {t0} unchanged (a causal "
                          "mixing step cannot see a later position)")
        moved = (after[:, :, t0] - before[:, :, t0]).abs().amax(dim=(0, 2)).min().item()  # the least-moved head
        expect(moved > 1e-6, calls[1], f"changing the key and value at position {t0} moved one head's outputs at "
               f"{t0} by {moved:.3g}: with mu = {mu} position {t0} must read its own key and value")
    yield check(*calls, judge=causal)
