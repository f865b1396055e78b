"""Grades exercises/ex07_lm.py (or solutions/ with --impl solutions) against minilin.data and minilin.train."""
import math
import os
import pickle

import pytest
import torch

from minilin.data import IGNORE, MASK_ID, decode, encode, next_token_batch
from minilin.model import lm_loss
from minilin.train import lr_at

TOL = 1e-6  # float32 cross-entropy of O(1) values summed over ~100 terms: round-off ~1e-7


def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.task7_1
@pytest.mark.parametrize("text", ["", "hello", "naïve café ✓ 日本語\n\ttabs", "🙂 emoji (4 bytes)"])
def test_byte_tokenizer(impl, text):
    mod = impl("ex07_lm")
    ids = mod.encode_bytes(text)
    assert ids.dtype == torch.long and torch.equal(ids, encode(text))
    assert mod.decode_bytes(ids) == text == decode(ids)
    if len(ids) > 1 and ids[-1] >= 0x80:  # cut a multi-byte character: replaced, not an exception
        assert mod.decode_bytes(ids[:-1]).endswith("\ufffd")


@pytest.mark.task7_2
def test_shift_for_next_token(impl):
    window = torch.randint(256, (3, 9), generator=gen(0))
    x, y = impl("ex07_lm").shift_for_next_token(window)
    assert x.shape == y.shape == (3, 8)
    for row in range(3):  # a stream of exactly L + 1 tokens has one window: minilin's batch must agree
        ref_x, ref_y = next_token_batch(window[row], 1, 8, generator=gen(0))
        assert torch.equal(x[row:row + 1], ref_x) and torch.equal(y[row:row + 1], ref_y)
    assert torch.equal(x, window[:, :-1]) and torch.equal(y, window[:, 1:])
    assert torch.equal(x[:, 1:], y[:, :-1])  # the target at t is the input at t + 1


@pytest.mark.task7_3
def test_lm_loss_and_bits(impl):
    mod = impl("ex07_lm")
    logits = torch.randn(2, 7, 256, generator=gen(1)) * 3
    targets = torch.randint(256, (2, 7), generator=gen(2))
    targets[0, :3] = IGNORE
    got = mod.lm_loss(logits, targets)
    torch.testing.assert_close(got, lm_loss(logits, targets), rtol=0, atol=TOL)
    uniform = mod.lm_loss(torch.zeros(1, 4, 256), torch.tensor([[1, 2, IGNORE, 3]]))
    assert float(uniform) == pytest.approx(math.log(256), abs=TOL)
    assert mod.bits_per_byte(math.log(256)) == pytest.approx(8.0)
    assert mod.bits_per_byte(torch.tensor(math.log(2) * 1.5)) == pytest.approx(1.5)


@pytest.mark.task7_4
def test_mask_for_mlm(impl):
    # seed 0, 64 x 256 = 16384 positions; bounds are 4 binomial standard errors
    tokens = torch.randint(256, (64, 256), generator=gen(3))
    corrupted, targets = impl("ex07_lm").mask_for_mlm(tokens, generator=gen(0), mask_prob=0.15)
    assert corrupted.shape == targets.shape == tokens.shape
    selected = targets != IGNORE
    n, k = tokens.numel(), int(selected.sum())
    assert abs(k / n - 0.15) < 4 * math.sqrt(0.15 * 0.85 / n)
    assert torch.equal(targets[selected], tokens[selected])
    assert torch.equal(corrupted[~selected], tokens[~selected])
    frac_mask = (corrupted[selected] == MASK_ID).float().mean().item()
    frac_same = (corrupted[selected] == tokens[selected]).float().mean().item()
    assert abs(frac_mask - 0.8) < 4 * math.sqrt(0.8 * 0.2 / k)
    assert abs(frac_same - (0.1 + 0.1 / 256)) < 4 * math.sqrt(0.1 * 0.9 / k)
    assert ((corrupted >= 0) & (corrupted <= MASK_ID)).all()
    again, _ = impl("ex07_lm").mask_for_mlm(tokens, generator=gen(0), mask_prob=0.15)
    assert torch.equal(again, corrupted)  # every random number comes from the generator
    _, t2 = impl("ex07_lm").mask_for_mlm(tokens, generator=gen(1), mask_prob=0.5)
    assert abs((t2 != IGNORE).float().mean().item() - 0.5) < 4 * math.sqrt(0.25 / n)


@pytest.mark.task7_5
def test_lr_schedule(impl):
    f = impl("ex07_lm").lr_at
    kw = dict(lr=3e-3, steps=200, warmup=20, min_lr=3e-4)
    got = [f(s, **kw) for s in range(0, 201)]
    want = [lr_at(s, **kw) for s in range(0, 201)]
    assert got == pytest.approx(want, rel=1e-12)
    assert f(0, lr=1.0, steps=10, warmup=0, min_lr=0.0) == pytest.approx(1.0)


class NotAWeight:
    pass


@pytest.mark.task7_6
def test_checkpoint_round_trip_is_atomic_and_safe(impl, tmp_path):
    mod = impl("ex07_lm")
    path = tmp_path / "ckpt.pt"
    state = {"model": {"w": torch.arange(6.0).view(2, 3)}, "step": 7, "history": [5.5, 4.25]}
    mod.save_checkpoint(state, path)
    back = mod.load_checkpoint(path)
    assert torch.equal(back["model"]["w"], state["model"]["w"]) and back["step"] == 7
    assert back["history"] == [5.5, 4.25]
    # an object that fails half-way through pickling must leave the old checkpoint intact, and no litter
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        mod.save_checkpoint({"w": torch.zeros(100), "bad": lambda: 0}, path)
    assert mod.load_checkpoint(path)["step"] == 7
    assert os.listdir(tmp_path) == ["ckpt.pt"]
    # weights_only: a pickled arbitrary object is refused
    torch.save({"obj": NotAWeight()}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError):
        mod.load_checkpoint(tmp_path / "evil.pt")
