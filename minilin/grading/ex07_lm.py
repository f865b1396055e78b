"""Checks for exercises/ex07_lm.py (Tasks 7.1-7.6), against minilin.data, minilin.model and minilin.train."""
import dataclasses
import math

import torch

from minilin.grading.calls import Gen, Raised, Scratch, Unpicklable
from minilin.grading.checks import Chapter, Fn, check, close, equal, expect, expect_close, expecting, gen, kind

CHAPTER = Chapter(7, "ex07_lm", "the pieces of a byte-level LM's training loop")
TOL = 1e-6  # float32 cross-entropy of O(1) values summed over ~100 terms: round-off ~1e-7
IGNORE, MASK_ID = -100, 256


@CHAPTER.task("7.1", "encode_bytes", "decode_bytes")
def byte_tokenizer(encode_bytes, decode_bytes):
    """the UTF-8 byte tokenizer and its inverse"""
    from minilin.data import decode, encode
    for text in ["", "hello", "naïve café ✓ 日本語\n\ttabs", "🙂 emoji (4 bytes)"]:
        ids = encode(text)
        yield equal(encode_bytes(text), ids, what="the UTF-8 bytes as a long tensor")
        yield equal(decode_bytes(ids), decode(ids), what=repr(text))
        if len(ids) > 1 and ids[-1] >= 0x80:  # cut a multi-byte character: replaced, not an exception
            call = decode_bytes(ids[:-1])
            yield check(call, judge=lambda got, call=call: expect(
                isinstance(got, str) and got.endswith("\ufffd"), call,
                f"returned {kind(got)}; a cut character must become U+FFFD (errors=\"replace\")"))


@CHAPTER.task("7.2", "shift_for_next_token")
def shift_for_next_token(f):
    """inputs and next-token targets from a window"""
    from minilin.data import next_token_batch
    window = torch.randint(256, (3, 9), generator=gen(0))
    # a stream of exactly L + 1 tokens has one window: minilin's batch of it, row by row
    rows = [next_token_batch(row, 1, 8, generator=gen(0)) for row in window]
    expected = (torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows]))
    yield equal(f(window), expected, what="minilin.data.next_token_batch: (window[:, :-1], window[:, 1:])")


@CHAPTER.task("7.3", "lm_loss", "bits_per_byte")
def lm_loss_and_bits(lm_loss, bits_per_byte):
    """the LM loss with ignored targets, and bits per byte"""
    from minilin.model import lm_loss as reference
    logits = torch.randn(2, 7, 256, generator=gen(1)) * 3
    targets = torch.randint(256, (2, 7), generator=gen(2))
    targets[0, :3] = IGNORE
    yield close(lm_loss(logits, targets), reference(logits, targets), atol=TOL,
                what="minilin.model.lm_loss (mean over the non-ignored targets)")
    yield close(lm_loss(torch.zeros(1, 4, 256), torch.tensor([[1, 2, IGNORE, 3]])), torch.tensor(math.log(256)),
                atol=TOL, what="ln 256 for uniform logits")
    yield close(bits_per_byte(math.log(256)), 8.0, atol=0.0, rtol=1e-6, what="8 bits for ln 256 nats")
    yield close(bits_per_byte(torch.tensor(math.log(2) * 1.5)), 1.5, atol=0.0, rtol=1e-6,
                what="1.5 bits (input a 0-d tensor)")


@CHAPTER.task("7.4", "mask_for_mlm")
def mask_for_mlm(f):
    """BERT's 80/10/10 masked-LM corruption"""
    # seed 0, 64 x 256 = 16384 positions; bounds are 4 binomial standard errors
    tokens = torch.randint(256, (64, 256), generator=gen(3))
    first, again = f(tokens, generator=Gen(0), mask_prob=0.15), f(tokens, generator=Gen(0), mask_prob=0.15)
    half = f(tokens, generator=Gen(1), mask_prob=0.5)
    n = tokens.numel()

    def judge(a, b, c):
        ok = all(isinstance(r, (tuple, list)) and len(r) == 2 and all(isinstance(t, torch.Tensor) and
                 t.shape == tokens.shape for t in r) for r in (a, b, c))
        expect(ok, first, f"returned {kind(a)}, expected (corrupted, targets), two tensors shaped like tokens")
        corrupted, targets = a
        selected = targets != IGNORE
        k = int(selected.sum())
        expect(abs(k / n - 0.15) < 4 * math.sqrt(0.15 * 0.85 / n), first,
               f"{k / n:.4f} of the positions selected, expected 0.15 ± 4 standard errors")
        expect_close(targets[selected], tokens[selected], call=first, what="the original bytes at selected positions")
        expect_close(corrupted[~selected], tokens[~selected], call=first, what="the input at unselected positions")
        frac_mask = (corrupted[selected] == MASK_ID).float().mean().item()
        frac_same = (corrupted[selected] == tokens[selected]).float().mean().item()
        expect(abs(frac_mask - 0.8) < 4 * math.sqrt(0.8 * 0.2 / k), first,
               f"{frac_mask:.3f} of the selected positions are MASK_ID, expected 0.8")
        expect(abs(frac_same - (0.1 + 0.1 / 256)) < 4 * math.sqrt(0.1 * 0.9 / k), first,
               f"{frac_same:.3f} of the selected positions keep their byte, expected 0.1 (+ random hits)")
        expect(bool(((corrupted >= 0) & (corrupted <= MASK_ID)).all()), first, "ids outside 0..256")
        expect_close(b[0], corrupted, call=again, what="the first result with the same seed (use the generator)")
        share = (c[1] != IGNORE).float().mean().item()
        expect(abs(share - 0.5) < 4 * math.sqrt(0.25 / n), half, f"{share:.4f} selected, expected 0.5")
    yield check(first, again, half, judge=judge)


@CHAPTER.task("7.5", "lr_at")
def lr_at(f):
    """linear warm-up, then cosine decay"""
    from minilin.train import lr_at as reference
    kw = dict(lr=3e-3, steps=200, warmup=20, min_lr=3e-4)
    call = f.each([((s,), kw) for s in range(201)], label="lr_at(step, lr=3e-3, steps=200, warmup=20, "
                                                          "min_lr=3e-4) for step = 0..200")
    want = [reference(s, **kw) for s in range(201)]
    yield close(call, want, atol=0.0, rtol=1e-12, what="minilin.train.lr_at at every step")
    yield close(f(0, lr=1.0, steps=10, warmup=0, min_lr=0.0), 1.0, atol=0.0, rtol=1e-12,
                what="lr at step 0 without warm-up")


@CHAPTER.task("7.6", "save_checkpoint", "load_checkpoint")
def checkpoint(save, load):
    """atomic checkpoint saving and weights-only loading"""
    state = {"model": {"w": torch.arange(6.0).view(2, 3)}, "step": 7, "history": [5.5, 4.25]}
    ckpt, evil = Scratch("ckpt.pt"), Scratch("evil.pt")
    listdir = dataclasses.replace(Fn("@listdir")(Scratch("")), label="the files in the folder after a failed save")
    calls = (dataclasses.replace(save(state, ckpt), label="save_checkpoint(state, 'ckpt.pt')"), load(ckpt),
             expecting(save(Unpicklable(), ckpt), "PicklingError", "AttributeError", "TypeError"),
             load(ckpt), listdir, Fn("@write_unsafe_pickle")(evil), expecting(load(evil), "UnpicklingError"))

    def judge(saved, back, failed, again, files, _, refused):
        expect_close(back, state, call=calls[1], what="the saved state")
        expect(isinstance(failed, Raised), calls[2], "an object that cannot be pickled must raise (and leave no "
                                                    "partial file behind)")
        expect(isinstance(again, dict) and again.get("step") == 7, calls[3],
               "after a failed save the previous checkpoint must still load (write to a temporary file, "
               "then os.replace)")
        expect(files == ["ckpt.pt"], calls[4], f"the folder holds {files}; expected only ckpt.pt (remove the "
                                               "temporary file when saving fails)")
        expect(isinstance(refused, Raised), calls[6], "loaded a pickled arbitrary object: use "
                                                        "torch.load(..., weights_only=True)")
    yield check(*calls, judge=judge)
