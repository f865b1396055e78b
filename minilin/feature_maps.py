"""Feature maps φ for linear attention (minilin.linear): one small object per map, as fast-transformers'
`feature_maps/` does. A map is a pure φ, applied to each query and each key on its own: `query(q)` and
`key(k)` map (..., N, D) -> (..., N, F); exponential maps return the exponents e (φ = exp(e) up to factors that
cancel) so that `minilin.linear.linear_attention` can stabilise them (the shifts it runs: its module docstring).
"""

import torch


class FeatureMap:
    """φ for linear attention. `query(q)` and `key(k)` map (..., N, D) -> (..., N, F), row by row.

    exponential=True: they return exponents e (φ = exp(e) up to a per-query or global constant), which
    minilin.linear shifts before exp.
    """
    name = "feature map"
    exponential = False

    def query(self, q):
        raise NotImplementedError

    def key(self, k):
        raise NotImplementedError

    def features(self, x, *, is_query):
        """The unstabilised φ(x) itself (overflows for large inputs; for plots and small checks)."""
        e = self.query(x) if is_query else self.key(x)
        return torch.exp(e) if self.exponential else e

    def __repr__(self):
        return self.name


class ELUPlusOne(FeatureMap):
    """φ(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020, arXiv 2006.16236, eq. 7): F = D, no randomness."""
    name = "elu_plus_one"

    def query(self, q):
        # exp(x) for x <= 0, not elu(x) + 1 = (exp(x) - 1) + 1: in float32 the latter is exactly 0 below x = -17.3,
        # and a query whose features are all 0 divides 0 by 0. Equal in exact arithmetic; positive down to x = -103.
        return torch.where(q > 0, q + 1, torch.exp(q.clamp(max=0)))

    key = query


elu_plus_one = ELUPlusOne()


def _check_projection(x, projection):
    if not isinstance(projection, torch.Tensor) or projection.ndim != 2 or projection.shape[1] != x.shape[-1]:
        got = tuple(projection.shape) if isinstance(projection, torch.Tensor) else type(projection).__name__
        raise ValueError(f"projection must have shape (nb_features, head_dim={x.shape[-1]}), got {got}; "
                         f"draw it with minilin.performer.orthogonal_gaussian(m, {x.shape[-1]}, generator=...)")


class PositiveRandomFeatures(FeatureMap):
    """FAVOR+ features φ(x) = exp(Wx' − |x'|²/2)/√m, x' = x·D^(-1/4) (Lemma 1 of arXiv 2009.14794).

    projection: (m, D) rows w_i; E[φ(q)·φ(k)] = exp(qᵀk/√D) for w_i ~ N(0, I) (normalize=False: exp(qᵀk)).
    As exponents: queries Wq' (the −|q'|²/2 and −log √m are per-query constants and cancel), keys
    Wk' − |k'|²/2 (the per-key term does not cancel).
    """
    name = "positive random features"
    exponential = True

    def __init__(self, projection, *, normalize=True):
        self.projection, self.normalize = projection, normalize

    def _wx(self, x):
        _check_projection(x, self.projection)
        scale = x.shape[-1] ** -0.25 if self.normalize else 1.0
        return x @ (self.projection.to(x.dtype).T * scale), 0.5 * scale ** 2 * (x * x).sum(-1, keepdim=True)

    def query(self, q):
        return self._wx(q)[0]

    def key(self, k):
        wx, half_sq = self._wx(k)
        return wx.sub_(half_sq)  # wx is a fresh temporary (the matmul keeps its inputs, not its output)


class TrigRandomFeatures(FeatureMap):
    """exp(|x'|²/2)/√m · [sin Wx', cos Wx']: unbiased for exp(x'ᵀy') too, but of both signs, so the
    normaliser can be ~0 or negative where softmax is small (Lemma 2 of arXiv 2009.14794). Not stabilised."""
    name = "trigonometric random features"

    def __init__(self, projection, *, normalize=True):
        self.projection, self.normalize = projection, normalize

    def query(self, x):
        _check_projection(x, self.projection)
        scale = x.shape[-1] ** -0.25 if self.normalize else 1.0
        wx = x @ (self.projection.to(x.dtype).T * scale)  # (..., N, m)
        amp = torch.exp(0.5 * scale ** 2 * (x * x).sum(-1, keepdim=True)) * self.projection.shape[0] ** -0.5
        return torch.cat([torch.sin(wx), torch.cos(wx)], dim=-1) * amp  # (..., N, 2m)

    key = query


class EfficientPair(FeatureMap):
    """Causal efficient attention's maps, as linear-attention-transformer 0.19.1 computes them (its
    `causal_linear_attn`): φ_q = softmax over each query's features, φ_k = exp(k), one normaliser per query.

    Non-causal efficient attention (Shen et al., arXiv 1812.01243, eq. 3) normalises each key feature over the
    key positions instead: a normaliser over the whole sequence, not a map of one key, so it is no FeatureMap;
    `minilin.efficient.efficient_attention` computes it itself.
    """
    name = "softmax-over-features / exp (efficient attention)"
    exponential = True

    def query(self, q):
        return q  # softmax over features = exp(q) / a per-query constant, which cancels

    def key(self, k):
        return k


