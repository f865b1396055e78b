"""minilin.explore: the four maps equal the package's attention functions, the errors and the explorer's redraws."""
import math

import pytest
import torch

from minilin.explore import (AttentionExplorer, attention_maps, fit_projection, layer_inputs, map_errors,
                             projection_loss, random_projection)
from minilin.feature_maps import elu_plus_one
from minilin.linear import linear_attention
from minilin.linformer import linformer_attention
from minilin.model import LMConfig, TinyLM
from minilin.performer import favor_attention, orthogonal_gaussian
from tests.helpers import gen


def head(n=48, d=16, seed=0):
    g = gen(seed)
    return tuple(torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(3))


@pytest.mark.parametrize("sigma", [0.25, 1.0, 2.0])
def test_maps_times_v_are_the_package_attentions(sigma):
    q, k, v = head()
    maps = attention_maps(q, k, sigma=sigma, proj_len=8, nb_features=32, seed=5)
    qs, ks, v4 = sigma * q[None, None], sigma * k[None, None], v[None, None]
    exact = torch.softmax(qs @ ks.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)[0, 0]
    torch.testing.assert_close(maps["exact"], exact, rtol=0, atol=1e-14)
    W = orthogonal_gaussian(32, 16, generator=gen(6), dtype=torch.float64)   # FAVOR+ uses seed + 1
    torch.testing.assert_close(maps["FAVOR+"] @ v, favor_attention(qs, ks, v4, W)[0, 0], rtol=0, atol=1e-12)
    torch.testing.assert_close(maps["elu+1"] @ v, linear_attention(qs, ks, v4, feature_map=elu_plus_one)[0, 0],
                               rtol=0, atol=1e-12)
    E = torch.randn(8, 48, generator=gen(5), dtype=torch.float64) / math.sqrt(48)   # fan_in: N(0, 1/n)
    A = torch.softmax(qs[0, 0] @ (E @ ks[0, 0]).T / 4.0, -1)                     # (n, k)
    torch.testing.assert_close(maps["Linformer"] @ v, A @ (E @ v), rtol=0, atol=1e-12)   # softmax(q(Ek)ᵀ)(Ev)
    for name in ("exact", "FAVOR+", "elu+1"):   # rows of a probability map sum to 1
        torch.testing.assert_close(maps[name].sum(-1), torch.ones(48, dtype=torch.float64), rtol=0, atol=1e-12)


def test_randomness_is_per_knob():
    q, k, _ = head()
    a = attention_maps(q, k, proj_len=8, nb_features=16)
    b = attention_maps(q, k, proj_len=16, nb_features=16)
    c = attention_maps(q, k, proj_len=8, nb_features=64)
    assert torch.equal(a["FAVOR+"], b["FAVOR+"]) and torch.equal(a["Linformer"], c["Linformer"])
    assert not torch.equal(a["Linformer"], b["Linformer"]) and not torch.equal(a["FAVOR+"], c["FAVOR+"])


def test_errors_are_relative_to_exact_and_fall_with_features_on_soft_maps():
    q, k, v = head(n=64, d=16)
    few = map_errors(attention_maps(q, k, sigma=0.2, nb_features=4), v)
    many = map_errors(attention_maps(q, k, sigma=0.2, nb_features=1024), v)
    assert few["exact"] == {"map": 0.0, "output": 0.0}
    uniform = torch.full((64, 64), 1 / 64, dtype=torch.float64)
    exact = attention_maps(q, k, sigma=0.2)["exact"]
    assert few["uniform 1/N"]["map"] == pytest.approx(float((uniform - exact).norm() / exact.norm()), rel=1e-12)
    assert many["FAVOR+"]["map"] < 0.5 * few["FAVOR+"]["map"]
    rows = slice(10, 20)
    maps = attention_maps(q, k)
    by_hand = (maps["elu+1"][rows] - maps["exact"][rows]).norm() / maps["exact"][rows].norm()
    assert map_errors(maps, v, rows)["elu+1"]["map"] == pytest.approx(float(by_hand), rel=1e-12)


def test_layer_inputs_are_what_the_layer_mixes():
    torch.manual_seed(0)
    model = TinyLM(LMConfig(block_size=32, dim=32, depth=2, heads=2, positions="rope", attention="exact")).double()
    idx = torch.randint(0, 256, (2, 32), generator=gen(1))
    seen = {}
    attn = model.blocks[1].attn
    original = attn.mix
    attn.mix = lambda q, k, v, **kw: seen.setdefault("qkv", (q, k, v)) and original(q, k, v, **kw)
    with torch.no_grad():
        model(idx)
        q, k, v = layer_inputs(model, idx, layer=1)
    for got, want in zip((q, k, v), seen["qkv"]):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="layer must be in"):
        layer_inputs(model, idx, layer=2)


def test_bad_input_names_the_fix():
    q, k, v = head()
    with pytest.raises(ValueError, match="pick a head first"):
        attention_maps(q[None, None], k[None, None])
    with pytest.raises(ValueError, match="sigma must be a positive"):
        attention_maps(q, k, sigma=0.0)
    with pytest.raises(ValueError, match="positive ints"):
        attention_maps(q, k, proj_len=0)
    with pytest.raises(ValueError, match="same length"):
        AttentionExplorer(q, k, v[:10])


def test_figure_uses_one_colour_scale_and_the_widget_redraws():
    pytest.importorskip("ipywidgets")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    q, k, v = head(n=40)
    explorer = AttentionExplorer(q, k, v, rows=slice(20, 40))
    fig = explorer.figure(sigma=1.0, proj_len=8, nb_features=16)
    images = {ax.get_title().split(",")[0].split("\n")[0]: ax.images[0] for ax in fig.axes if ax.images}
    assert sorted(images) == sorted(["exact", "FAVOR+", "elu+1", "Linformer"])
    probability = [images[name] for name in ("exact", "FAVOR+", "elu+1")]
    assert len({im.get_clim() for im in probability}) == 1 and probability[0].get_clim()[0] == 0  # one scale
    lo, hi = images["Linformer"].get_clim()
    assert lo == -hi and hi == pytest.approx(float(images["Linformer"].get_array().__abs__().max()))  # centred
    assert images["exact"].get_array().shape == (20, 40)
    plt.close(fig)
    box = explorer.widget(sigma=1.0, proj_len=8, nb_features=16)
    assert explorer.last[0] == {"sigma": 1.0, "proj_len": 8, "nb_features": 16, "learned": False}
    assert "learned" not in box.sliders                              # no projections given: no toggle
    before, png = explorer.last[1], box.image.value
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and "FAVOR+" in box.table.value
    box.sliders["nb_features"].value = 1024
    assert box.image.value != png
    assert explorer.last[0]["nb_features"] == 1024 and explorer.last[1]["FAVOR+"] != before["FAVOR+"]
    assert explorer.last[1]["Linformer"] == before["Linformer"]       # only the moved knob's map changes
    assert max(box.sliders["proj_len"].options) <= 40                 # k never exceeds n
    plt.close("all")


def copy_head(batch=64, n=24, span=8, d=8, seed=0):
    """A copy-like head on `batch` inputs: slot j (the last `span` rows) attends sharply to position j, whose key
    and value carry random content; the positions sit at fixed places, so one E can serve every input."""
    g = gen(seed)
    pos = torch.randn(n, d, generator=g, dtype=torch.float64)
    k = pos + 0.3 * torch.randn(batch, n, d, generator=g, dtype=torch.float64)
    q = 0.3 * torch.randn(batch, n, d, generator=g, dtype=torch.float64)
    q[:, n - span:] += 3.0 * pos[:span]                                 # slot j looks for position j
    v = torch.randn(batch, n, d, generator=g, dtype=torch.float64)
    return q, k, v, slice(n - span, n)


@pytest.mark.parametrize("tied", [False, True])
def test_fitted_projection_lowers_the_training_loss_from_its_random_start(tied):
    q, k, v, rows = copy_head()
    E, F = fit_projection(q, k, v, proj_len=8, rows=rows, steps=150, lr=0.01, tied=tied, generator=gen(3))
    start = random_projection(8, 24, gen(3))                            # the start: the explorer's random E, seed 3
    before, after = float(projection_loss(q, k, v, start, start, rows)), float(projection_loss(q, k, v, E, F, rows))
    assert after < 0.5 * before and after < 0.5                        # the fit lowers the loss, and clearly
    assert torch.equal(E, F) == tied
    again = fit_projection(q, k, v, proj_len=8, rows=rows, steps=150, lr=0.01, tied=tied, generator=gen(3))
    assert torch.equal(again[0], E) and torch.equal(again[1], F)     # one generator: the fit repeats exactly
    *same, losses = fit_projection(q, k, v, proj_len=8, rows=rows, steps=150, lr=0.01, tied=tied, generator=gen(3),
                                   return_losses=True)
    assert torch.equal(same[0], E) and len(losses) == 150 and sum(losses[-20:]) < 0.5 * sum(losses[:20])   # the curve
    by_hand = torch.softmax(q[0, rows] @ (E @ k[0]).T / math.sqrt(8), -1) @ (F @ v[0])
    exact = torch.softmax(q[0, rows] @ k[0].T / math.sqrt(8), -1) @ v[0]
    loss0 = float(((by_hand - exact) ** 2).sum() / (exact ** 2).sum())
    assert float(projection_loss(q[0], k[0], v[0], E, F, rows)) == pytest.approx(loss0, rel=1e-12)


@pytest.mark.parametrize("sigma", [0.5, 1.0])
def test_given_projections_are_the_package_linformer(sigma):
    q, k, v = head()
    E, F = random_projection(5, 48, gen(1)), torch.rand(5, 48, generator=gen(2), dtype=torch.float64)
    maps = attention_maps(q, k, sigma=sigma, proj_len=5, projections={5: (E, F)})
    want = linformer_attention(sigma * q[None, None], sigma * k[None, None], v[None, None], E, F)[0, 0]
    torch.testing.assert_close(maps["Linformer"] @ v, want, rtol=0, atol=1e-12)
    other_k = attention_maps(q, k, proj_len=8, projections={5: (E, F)}, seed=5)   # k not given: the random E
    torch.testing.assert_close(other_k["Linformer"], attention_maps(q, k, proj_len=8, seed=5)["Linformer"],
                               rtol=0, atol=0)
    E0 = random_projection(8, 48, gen(5))                             # the default is that random E, E = F
    same = attention_maps(q, k, proj_len=8, projections={8: (E0, E0)})
    torch.testing.assert_close(same["Linformer"], other_k["Linformer"], rtol=0, atol=0)


def test_learned_projections_in_the_explorer_and_its_toggle():
    pytest.importorskip("ipywidgets")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    q, k, v = head(n=40)
    E, F = random_projection(8, 40, gen(1)), torch.rand(8, 40, generator=gen(2), dtype=torch.float64) / 40
    explorer = AttentionExplorer(q, k, v, rows=slice(20, 40), projections={8: (E, F)})
    learned = explorer.compute(1.0, 8, 16, learned=True)
    torch.testing.assert_close(learned[0]["Linformer"],
                               attention_maps(q, k, proj_len=8, projections={8: (E, F)})["Linformer"][20:],
                               rtol=0, atol=0)
    assert learned[1]["Linformer"] != explorer.compute(1.0, 8, 16)[1]["Linformer"]
    fig = explorer.figure(proj_len=8, nb_features=16, learned=True)
    assert any("learned for this head" in ax.get_title() for ax in fig.axes)
    plt.close(fig)
    with pytest.raises(ValueError, match="no learned projection for k=16"):
        explorer.compute(1.0, 16, 16, learned=True)
    box = explorer.widget(proj_len=8, nb_features=16)
    assert list(box.sliders["proj_len"].options) == [8] and explorer.last[0]["learned"] is False
    before = explorer.last[1]["Linformer"]
    box.sliders["learned"].value = True
    assert explorer.last[0]["learned"] is True and explorer.last[1]["Linformer"] == learned[1]["Linformer"]
    assert explorer.last[1]["Linformer"] != before and explorer.last[1]["FAVOR+"] == learned[1]["FAVOR+"]
    plt.close("all")


def test_bad_projection_arguments_name_the_fix():
    q, k, v = head()
    with pytest.raises(ValueError, match=r"shape \(k, n\) = \(4, 48\)"):
        attention_maps(q, k, proj_len=4, projections={4: (torch.zeros(4, 40), torch.zeros(4, 40))})
    with pytest.raises(ValueError, match="pair"):
        attention_maps(q, k, projections={4: torch.zeros(4, 48)})
    with pytest.raises(ValueError, match="must be a dict"):
        AttentionExplorer(q, k, v, projections=[(torch.zeros(4, 48), torch.zeros(4, 48))])
    with pytest.raises(ValueError, match=r"\(4, 48\)"):
        AttentionExplorer(q, k, v).set_projections({4: (torch.zeros(4, 48), torch.zeros(3, 48))})
    with pytest.raises(ValueError, match="generator must be a torch.Generator"):
        fit_projection(q, k, v, proj_len=4)
    with pytest.raises(ValueError, match="proj_len must be a positive int"):
        fit_projection(q, k, v, proj_len=0, generator=gen(0))
    with pytest.raises(ValueError, match="lr must be a positive"):
        fit_projection(q, k, v, proj_len=4, lr=-1.0, generator=gen(0))
    with pytest.raises(ValueError, match="same B inputs"):
        fit_projection(q[None], k[None, :10], v[None], proj_len=4, generator=gen(0))
