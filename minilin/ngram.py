"""Byte n-gram counts, add-alpha smoothed: the baselines with no attention of notebook 07 (unigram, bigram, trigram)."""
import torch

ALPHAS = (0.001, 0.01, 0.1, 1.0)


def _grams(t, n):
    """The n-grams of the 1-d byte tensor t as base-256 integers: (len(t) - n + 1,)."""
    return sum(t[j:len(t) - n + 1 + j] * 256 ** (n - 1 - j) for j in range(n))


class NGramCounts:
    """P(next byte | the order - 1 bytes up to the current one), counted on `train_ids`, add-`alpha` smoothed.
    Where a window has fewer bytes before its current one than that, the model of the next lower order (`lower`)
    predicts."""

    def __init__(self, train_ids, order, alpha, lower=None):
        t = train_ids.long()
        if order > 1 and lower is None:
            raise ValueError("an n-gram of order > 1 needs the model of the order below for a window's first bytes")
        self.order, self.alpha, self.lower = order, alpha, lower
        self.full = torch.bincount(_grams(t, order), minlength=256 ** order).double()
        self.ctx = self.full.view(-1, 256).sum(-1)          # each context's count, followed by some byte

    def probs(self, x):
        """P(each next byte) at every position of the windows x (B, N): (B, N, 256), float64."""
        n = self.order - 1                                       # bytes of context, the current one included
        if n == 0:
            return ((self.full + self.alpha) / (self.ctx + 256 * self.alpha)).expand(*x.shape, 256)
        ctx = _grams(x.long().T, n).T if x.shape[1] >= n else x.new_zeros(x.shape[0], 0)   # (B, N - n + 1)
        p = (self.full[ctx[..., None] * 256 + torch.arange(256)] + self.alpha) \
            / (self.ctx[ctx][..., None] + 256 * self.alpha)
        return torch.cat([self.lower.probs(x[:, :n - 1]), p], dim=1)

    def bits(self, x, y):
        """Bits per byte on the targets y (B, N) of the windows x."""
        return float(-self.probs(x).gather(-1, y.long()[..., None]).log2().mean())


def fit_ngrams(train_ids, x, y, orders=(1, 2, 3), alphas=ALPHAS):
    """{order: NGramCounts} for orders 1, 2, ..., each alpha picked from `alphas` for the fewest bits on (x, y),
    the lower orders' alphas fixed first. Picking alpha on the scored bytes favours the counts."""
    models, lower = {}, None
    for order in range(1, max(orders) + 1):
        lower = min((NGramCounts(train_ids, order, a, lower) for a in alphas), key=lambda m: m.bits(x, y))
        models[order] = lower
    return {o: models[o] for o in orders}


def ngram_bits_per_byte(train_ids, x, y, order, alphas=ALPHAS):
    """Bits per byte of the order-`order` byte counts of `train_ids` on the targets y of windows x."""
    return fit_ngrams(train_ids, x, y, (order,), alphas)[order].bits(x, y)


__all__ = ["ALPHAS", "NGramCounts", "fit_ngrams", "ngram_bits_per_byte"]
