"""minilin.gated as an associative memory (notebook 09, section 3): P random unit pairs written into one D x D state,
each key read back, retrieval by angle. Statistics over independent draws (a draw's pairs share one state): gains
paired over the draws must exceed a few standard errors, means lie within 4 standard errors of a formula."""
import math

import pytest
import torch
import torch.nn.functional as F

from minilin import gated

D, DRAWS = 16, 256
f64 = torch.float64


def unit(P, seed):
    g = torch.Generator().manual_seed(seed + P)
    return F.normalize(torch.randn(DRAWS, 1, P, D, generator=g, dtype=f64), dim=-1)


def write_and_read(P, write, twice=False, beta=1.0):
    """(values, readouts r_i = Sᵀk_i) after writing P pairs (twice: each key again with a new value)."""
    keys, values = unit(P, 30), unit(P, 60)
    if twice:
        keys, values = keys.repeat(1, 1, 2, 1), torch.cat([values, unit(P, 90)], dim=2)
    if write == "additive":
        S = gated.retention(keys, keys, values, 1.0, scale=1.0, return_state=True)[1]
    else:
        ones = torch.ones(keys.shape[:3], dtype=f64)
        S = gated.gated_delta_rule(keys, keys, values, beta * ones, 0 * ones, scale=1.0, return_state=True)[1]
    return values[:, 0], (keys @ S)[:, 0, -P:]


def hits(P, write, twice=False, beta=1.0):
    """(DRAWS,) fraction of pairs whose readout points (in angle) at its (new) value among all values."""
    values, read = write_and_read(P, write, twice, beta)
    want = torch.arange(P, 2 * P) if twice else torch.arange(P)
    return ((F.normalize(read, dim=-1) @ values.transpose(-2, -1)).argmax(-1) == want).double().mean(-1)


def above(gain, n_se):
    return gain.mean() > n_se * gain.std() / DRAWS ** 0.5


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_additive_writes_beat_delta_at_beta_one_written_once_and_lose_rewritten(ratio):
    P = ratio * D
    assert above(hits(P, "additive") - hits(P, "delta"), 4)
    assert above(hits(P, "delta", twice=True) - hits(P, "additive", twice=True), 4)


@pytest.mark.parametrize("ratio", [1, 2, 10])
def test_a_smaller_delta_step_beats_additive_writes(ratio):
    P = ratio * D
    for beta in (0.1, 0.25):
        assert above(hits(P, "delta", beta=beta) - hits(P, "additive"), 3), beta
    assert abs(hits(P, "delta", beta=0.01).mean() - hits(P, "additive").mean()) < 0.02   # β -> 0: additive


@pytest.mark.parametrize("ratio", [0.25, 1, 4])
def test_additive_crosstalk_and_delta_trade_error_for_signal(ratio):
    """Additive: mean squared error (P − 1)/D. Delta at β = 1: less error, and less signal r_i·v_i."""
    P = int(ratio * D)
    (values, add), (_, delta) = write_and_read(P, "additive"), write_and_read(P, "delta")
    sq = lambda r: (r - values).pow(2).sum(-1).mean(-1)
    per_draw = sq(add)
    assert abs(per_draw.mean() - (P - 1) / D) < 4 * per_draw.std() / DRAWS ** 0.5
    assert sq(delta).mean() < per_draw.mean()
    assert above(((add - delta) * values).sum(-1).mean(-1), 4)
    assert math.isclose(float((delta[:, -1] - values[:, -1]).abs().max()), 0.0, abs_tol=1e-12)   # newest pair exact
