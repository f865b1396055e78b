"""minilin.explore: the four maps equal the package's attention functions, the errors and the explorer's redraws."""
import math

import pytest
import torch

from minilin.explore import AttentionExplorer, attention_maps, layer_inputs, map_errors
from minilin.feature_maps import elu_plus_one
from minilin.linear import linear_attention
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
    assert explorer.last[0] == {"sigma": 1.0, "proj_len": 8, "nb_features": 16}
    before, png = explorer.last[1], box.image.value
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and "FAVOR+" in box.table.value
    box.sliders["nb_features"].value = 1024
    assert box.image.value != png
    assert explorer.last[0]["nb_features"] == 1024 and explorer.last[1]["FAVOR+"] != before["FAVOR+"]
    assert explorer.last[1]["Linformer"] == before["Linformer"]       # only the moved knob's map changes
    assert max(box.sliders["proj_len"].options) <= 40                 # k never exceeds n
    plt.close("all")
