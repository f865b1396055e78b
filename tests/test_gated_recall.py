"""minilin.gated as an associative memory (notebook 09, section 3; retention on rewrites is tested here only): P random unit pairs written into one D x D state,
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


def write_and_read(P, write, rewritten=None, beta=1.0, gamma=1.0):
    """(values, readouts r_i = Sᵀk_i) after writing P pairs (rewritten (DRAWS, R): these keys again, new values)."""
    keys, values = unit(P, 30), unit(P, 60)
    if rewritten is not None:
        values = torch.cat([values, unit(rewritten.shape[1], 90)], dim=2)
        keys = torch.cat([keys, keys.gather(2, rewritten[:, None, :, None].expand(-1, 1, -1, D))], dim=2)
    if write == "additive":
        S = gated.retention(keys, keys, values, gamma, scale=1.0, return_state=True)[1]
    else:
        ones = torch.ones(keys.shape[:3], dtype=f64)
        S = gated.gated_delta_rule(keys, keys, values, beta * ones, 0 * ones, scale=1.0, return_state=True)[1]
    return values[:, 0], (keys @ S)[:, 0, :P]


def hits(P, write, beta=1.0):
    """(DRAWS,) fraction of pairs whose readout points (in angle) at its value among all values."""
    values, read = write_and_read(P, write, beta=beta)
    return ((F.normalize(read, dim=-1) @ values.transpose(-2, -1)).argmax(-1) == torch.arange(P)).double().mean(-1)


def rewrite_hits(P, write, gamma=1.0):
    """A random half of the keys rewritten in random order: (DRAWS,) fractions of rewritten keys reading their new
    value and of untouched keys reading their own, among all values."""
    R = P // 2
    redo = torch.rand(DRAWS, P, generator=torch.Generator().manual_seed(90 + P)).argsort(-1)[:, :R]
    want = torch.arange(P).repeat(DRAWS, 1).scatter(1, redo, torch.arange(P, P + R).repeat(DRAWS, 1))
    new = torch.zeros(DRAWS, P, dtype=torch.bool).scatter(1, redo, True)
    values, read = write_and_read(P, write, rewritten=redo, gamma=gamma)
    ok = ((F.normalize(read, dim=-1) @ values.transpose(-2, -1)).argmax(-1) == want).double()
    return ok[new].view(DRAWS, R).mean(-1), ok[~new].view(DRAWS, P - R).mean(-1)


def above(gain, n_se):
    return gain.mean() > n_se * gain.std() / DRAWS ** 0.5


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_additive_writes_beat_delta_at_beta_one_written_once(ratio):
    P = ratio * D
    assert above(hits(P, "additive") - hits(P, "delta"), 4)


@pytest.mark.parametrize("ratio", [0.5, 1, 2, 4])
def test_rewriting_half_the_keys_trades_new_values_for_untouched_keys(ratio):
    """Delta (β = 1) and retention (γ = 0.95) read the new value more than additive writes and keep fewer untouched
    keys; delta reads the new value more than retention up to P = D, retention more from 2D."""
    P = int(ratio * D)
    (add_new, add_kept), (delta_new, delta_kept) = rewrite_hits(P, "additive"), rewrite_hits(P, "delta")
    ret_new, ret_kept = rewrite_hits(P, "additive", gamma=0.95)
    for new, kept in ((delta_new, delta_kept), (ret_new, ret_kept)):
        assert above(new - add_new, 4) and above(add_kept - kept, 4)
    assert above(delta_new - ret_new, 4) if P <= D else above(ret_new - delta_new, 4)


@pytest.mark.parametrize("ratio", [1, 2, 10])
def test_a_smaller_delta_step_beats_additive_writes(ratio):
    """Section 3 (β = 0.25; β = 0.1 not in the notebook): a smaller gradient step cancels part of the crosstalk."""
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


@pytest.mark.parametrize("ratio", [0.5, 1])
def test_a_rewrite_costs_additive_writes_and_not_delta_against_fresh_keys_in_the_same_positions(ratio):
    """Notebook 09's appendix control for section 3: the last P/2 writes are fresh keys instead of rewrites."""
    P, R = int(ratio * D), int(ratio * D) // 2
    keys, values = unit(P, 30), torch.cat([unit(P, 60), unit(R, 90)], dim=2)
    keys = torch.cat([keys, unit(R, 120)], dim=2)
    fresh = {}
    for write in ("additive", "delta"):
        ones = torch.ones(keys.shape[:3], dtype=f64)
        S = (gated.retention(keys, keys, values, 1.0, scale=1.0, return_state=True)[1] if write == "additive" else
             gated.gated_delta_rule(keys, keys, values, ones, 0 * ones, scale=1.0, return_state=True)[1])
        read = (keys @ S)[:, 0, P:]
        fresh[write] = ((F.normalize(read, dim=-1) @ values[:, 0].transpose(-2, -1)).argmax(-1)
                        == torch.arange(P, P + R)).double().mean(-1)
    add_cost, delta_cost = fresh["additive"] - rewrite_hits(P, "additive")[0], fresh["delta"] - rewrite_hits(P, "delta")[0]
    assert above(add_cost, 4) and above(add_cost - delta_cost, 4) and abs(delta_cost.mean()) < 0.03
