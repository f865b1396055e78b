"""minilin.ngram: byte n-gram counts against entropies computed by hand on a tiny text."""
import math

import pytest
import torch

from minilin.data import encode
from minilin.ngram import NGramCounts, fit_ngrams, ngram_bits_per_byte

TRAIN = encode("aab" * 100)            # after a: a or b, half each; after b: always a; after aa: b; ab, ba: a
X, Y = encode("aab" * 4)[:-1].view(1, -1), encode("aab" * 4)[1:].view(1, -1)   # 11 targets


def test_hand_computed_entropies():
    tiny = (1e-9,)
    # unigram: p(a) = 2/3, p(b) = 1/3 over the targets (7 a, 4 b)
    n_a, n_b = int((Y == ord("a")).sum()), int((Y == ord("b")).sum())
    unigram = -(n_a * math.log2(2 / 3) + n_b * math.log2(1 / 3)) / Y.numel()
    assert ngram_bits_per_byte(TRAIN, X, Y, 1, tiny) == pytest.approx(unigram, abs=1e-6)
    # bigram: 1 bit where the current byte is a (aa and ab 100 times each), 0 where it is b (always ba)
    bigram = int((X == ord("a")).sum()) / Y.numel()
    assert ngram_bits_per_byte(TRAIN, X, Y, 2, tiny) == pytest.approx(bigram, abs=1e-6)
    # trigram: 0 bits from position 1 on; position 0 (current a, next a) falls back to the bigram's 1 bit
    assert ngram_bits_per_byte(TRAIN, X, Y, 3, tiny) == pytest.approx(1 / Y.numel(), abs=1e-6)


def test_probabilities_are_distributions_and_alpha_is_picked():
    models = fit_ngrams(TRAIN, X, Y, alphas=(1.0, 1e-3))
    for m in models.values():
        p = m.probs(X)
        assert p.shape == (*X.shape, 256) and torch.allclose(p.sum(-1), torch.ones(X.shape, dtype=p.dtype))
    assert models[2].alpha == 1e-3                     # the text is predictable: the smaller alpha wins
    assert models[3].bits(X, Y) < models[2].bits(X, Y) < models[1].bits(X, Y)


def test_order_above_one_needs_a_lower_order():
    with pytest.raises(ValueError, match="order below"):
        NGramCounts(TRAIN, 2, 0.1)
