"""Byte tokenizer, corpora, batches, masked-LM corruption and the synthetic tasks of minilin.data."""
import gzip
import hashlib
import math
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from minilin import data
from minilin.data import (
    COPY_MARK,
    IGNORE,
    KEYS,
    MASK_ID,
    MASK_TEXT,
    VALUES,
    AssociativeRecall,
    ByteCorpus,
    SpanCopy,
    bits,
    decode,
    encode,
    make_data,
    mask_tokens,
    next_token_batch,
    pydoc_text,
    random_windows,
    train_val_split,
)
from helpers import gen


@given(st.text())
def test_round_trip_is_lossless(text):
    ids = encode(text)
    assert ids.dtype == torch.long and ids.ndim == 1
    assert len(ids) == len(text.encode("utf-8"))
    assert ((0 <= ids) & (ids < 256)).all()
    assert decode(ids) == text


def test_decode_multibyte_mask_and_invalid_bytes():
    ids = encode("é✓")
    assert ids.tolist() == [0xC3, 0xA9, 0xE2, 0x9C, 0x93]
    assert decode(torch.tensor([104, 105, MASK_ID, 33])) == "hi" + MASK_TEXT + "!"
    assert decode(ids[:-1]) == "é\ufffd"  # a cut multi-byte character: replaced, not an exception
    with pytest.raises(UnicodeDecodeError):
        decode(ids[:-1], errors="strict")
    with pytest.raises(ValueError, match="ids must lie"):
        decode([300])


def test_pydoc_corpus_is_offline_and_fixed(tmp_path, monkeypatch):
    text = pydoc_text()
    assert 400_000 < len(text) < 600_000 and "Assignment statements" in text
    # the same bytes on every Python: the shipped copy, not this interpreter's pydoc_data (which changes by release)
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == data.PYDOC_SHA256 and len(text.encode("utf-8")) == 466_273
    if sys.version_info[:3] == (3, 11, 7):  # the release the copy was taken from
        from pydoc_data.topics import topics
        assert text == "\n\n".join(topics[key] for key in sorted(topics))
    broken = tmp_path / "pydoc_topics.txt.gz"
    broken.write_bytes(gzip.compress(text.encode("utf-8")[:-1]))
    monkeypatch.setattr(data, "PYDOC_FILE", broken)
    with pytest.raises(RuntimeError, match="not the corpus the stored runs used.*git checkout"):
        pydoc_text()
    monkeypatch.undo()
    corpus = ByteCorpus(block_size=64)
    assert len(corpus.tokens) == len(text.encode("utf-8"))
    assert decode(corpus.tokens[:200]) == text.encode("utf-8")[:200].decode("utf-8", errors="replace")


def test_split_is_contiguous_and_deterministic():
    tokens = torch.arange(1000)
    train, val = train_val_split(tokens, 0.1)
    assert torch.equal(train, torch.arange(900)) and torch.equal(val, torch.arange(900, 1000))
    with pytest.raises(ValueError):
        train_val_split(tokens, 1.5)


def test_next_token_batch_is_a_shifted_contiguous_window():
    tokens = torch.arange(500)  # value == position, so contiguity and the shift are visible
    x, y = next_token_batch(tokens, 64, 16, generator=gen(1))
    assert x.shape == y.shape == (64, 16) and x.dtype == torch.long
    assert torch.equal(y, x + 1)                      # targets[t] = x[t + 1]
    assert torch.equal(x[:, 1:] - x[:, :-1], torch.ones(64, 15, dtype=torch.long))
    assert y.max() < 500 and x.min() >= 0
    x2, _ = next_token_batch(tokens, 64, 16, generator=gen(1))
    x3, _ = next_token_batch(tokens, 64, 16, generator=gen(2))
    assert torch.equal(x, x2) and not torch.equal(x, x3)


def test_window_starts_cover_the_stream():
    # 4000 windows of length 10 over 110 tokens: every one of the 101 start offsets should appear (the
    # chance that a given start is missed is (1 - 1/101)^4000 ≈ 6e-18)
    starts = random_windows(torch.arange(110), 4000, 10, generator=gen(3))[:, 0]
    assert set(starts.tolist()) == set(range(101))
    with pytest.raises(ValueError, match="shorter than one window"):
        random_windows(torch.arange(5), 1, 10, generator=gen())


def test_corpus_batches_come_from_their_split():
    text = "".join(chr(ord("a") + i % 26) for i in range(900)) + "0123456789" * 10  # val = the digits
    corpus = ByteCorpus("toy", text=text, block_size=16, val_fraction=0.1)
    xv, yv = corpus.batch("val", 32, generator=gen())
    assert decode(xv).isdigit() and decode(yv).isdigit()
    xt, _ = corpus.batch("train", 32, generator=gen())
    assert decode(xt).isalpha()
    with pytest.raises(ValueError, match="split must be"):
        corpus.batch("test", 2, generator=gen())
    with pytest.raises(ValueError, match="fewer than block_size"):
        ByteCorpus("short", text="abc" * 20, block_size=16)


def test_masked_lm_rate_and_bert_mix():
    # seed 0, 64 x 256 = 16384 positions. Bounds: 4 standard errors of a binomial proportion.
    tokens = torch.randint(256, (64, 256), generator=gen(10))
    corrupted, targets = mask_tokens(tokens, generator=gen(0), mask_prob=0.15)
    selected = targets != IGNORE
    n, k = selected.numel(), int(selected.sum())
    assert abs(k / n - 0.15) < 4 * math.sqrt(0.15 * 0.85 / n)
    assert torch.equal(targets[selected], tokens[selected])           # the loss asks for the original byte
    assert torch.equal(corrupted[~selected], tokens[~selected])       # unselected positions are untouched
    masked = (corrupted == MASK_ID)[selected].float().mean().item()
    kept = (corrupted == tokens)[selected].float().mean().item()     # "keep" (10%) + random hits (0.1/256)
    randomised = 1.0 - masked - kept
    se = lambda p: 4 * math.sqrt(p * (1 - p) / k)
    assert abs(masked - 0.8) < se(0.8)
    assert abs(kept - (0.1 + 0.1 / 256)) < se(0.1)
    assert abs(randomised - 0.1 * 255 / 256) < se(0.1)
    assert not (corrupted[~selected] == MASK_ID).any()


def test_masked_lm_corpus_batch():
    corpus = ByteCorpus(block_size=128, objective="mlm")
    x, y = corpus.batch("train", 8, generator=gen())
    assert x.shape == y.shape == (8, 128)
    assert ((y == IGNORE) | ((y >= 0) & (y < 256))).all()
    assert (x == MASK_ID).any() and not corpus.requires_causal_model
    assert ByteCorpus(block_size=8).requires_causal_model
    with pytest.raises(ValueError, match="objective"):
        ByteCorpus(block_size=8, objective="causal")


@pytest.mark.parametrize("fused", [True, False])
def test_associative_recall_answers_are_the_bound_values(fused):
    task = AssociativeRecall(seq_len=96, n_pairs=12, n_queries=10, fused=fused)
    x, y = task.batch("train", 16, generator=gen(4))
    assert x.shape == y.shape == (16, 96)
    width = 1 if fused else 2
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        if fused:  # one byte >= 128 per pair: 128 + key * n_values + value
            pairs = {ord(KEYS[(t - 128) // 8]): ord(VALUES[(t - 128) % 8]) for t in row_x[:12]}
            assert all(t >= 128 for t in row_x[:12])
        else:
            pairs = dict(zip(row_x[0:24:2], row_x[1:24:2]))
        assert len(pairs) == 12                                   # keys are distinct in a sequence
        assert all(chr(k) in KEYS[:16] and chr(v) in VALUES[:8] for k, v in pairs.items())
        slots = [t for t, target in enumerate(row_y) if target != IGNORE]
        assert slots == list(range(86, 96))                       # the queries are scored in place
        for t in slots:
            assert row_y[t] == pairs[row_x[t]]                   # ... on the value bound to their key
        assert set(row_x[12 * width:86]) == {ord(".")}
    x2, _ = task.batch("train", 16, generator=gen(4))
    assert torch.equal(x, x2)
    if fused:
        shown = task.show(x[0])
        assert shown.count("[") == 12 and shown.endswith(decode(x[0, 86:]))
    with pytest.raises(ValueError, match="positions"):
        AssociativeRecall(seq_len=12, n_pairs=8, fused=fused)  # 8 (or 16) + 8 positions
    with pytest.raises(ValueError, match="fused pairs"):
        AssociativeRecall(n_keys=52, n_values=10)


def test_span_copy_targets_are_the_span():
    task = SpanCopy(seq_len=64, span_len=8)
    x, y = task.batch("val", 5, generator=gen(5))
    assert torch.equal(y[:, -8:], x[:, :8])
    assert (y[:, :-8] == IGNORE).all() and (x[:, -8:] == MASK_ID).all()
    assert (x[:, -9] == ord(COPY_MARK)).all()
    assert all(c in KEYS for c in decode(x[:, :8]))
    with pytest.raises(ValueError, match="span"):
        SpanCopy(seq_len=10, span_len=8)


def test_make_data_and_bits():
    assert isinstance(make_data("recall", block_size=128), AssociativeRecall)
    assert isinstance(make_data("copy", block_size=128), SpanCopy)
    assert make_data("pydoc", block_size=32).block_size == 32
    with pytest.raises(FileNotFoundError, match="no corpus named"):
        make_data("no/such/file.txt")
    assert bits(math.log(2.0)) == pytest.approx(1.0) and bits(math.log(256.0)) == pytest.approx(8.0)
