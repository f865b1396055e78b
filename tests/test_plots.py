"""minilin.plots: ratio tables, the Linformer Table 3 transcription, growth tables and figures, on a
synthetic bench CSV whose answers are known."""
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from minilin import plots  # noqa: E402
from minilin import lesson_plots  # noqa: E402
from minilin.bench import DEFAULT_METHODS, results  # noqa: E402


def synthetic(tmp_path=None):
    """exact: time n²·1e-9, memory n²; linformer-k128: time 4·n·128·1e-9, memory 8·n·128; a failed exact case;
    performer-causal and its peer: time 2·n·1e-6 and 8·n·1e-6 (ours 4x faster)."""
    rows = []
    common = {"device": "cpu", "device_name": "test", "dtype": "float32", "torch": "x", "threads": 2, "batch": 1,
              "heads": 8, "dim_head": 64, "nb_features": 256, "note": ""}
    for n in (1024, 4096, 8192, 65536):
        for method, proj_len, time_s, mem in (("exact", None, n * n * 1e-9, n * n),
                                              ("linformer-k128", 128, 4 * n * 128 * 1e-9, 8 * n * 128),
                                              ("performer-causal", None, 2 * n * 1e-6, 4000 * n),
                                              ("peer-performer-causal", None, 8 * n * 1e-6, 16000 * n)):
            status = "oom" if (method == "exact" and n == 65536) else "ok"
            for metric, value, source in (("time_fwd", time_s, "measured"),
                                          ("model_peak_fwd_bytes", mem, "model")):
                if source == "measured" and n == 65536 and method != "exact":
                    continue
                rows.append({**common, "method": method, "n": n, "metric": metric,
                             "value": value if (status == "ok" or source == "model") else math.nan,
                             "unit": {**results.MEASURED_METRICS, **results.MODEL_METRICS}[metric],
                             "source": source, "status": "ok" if source == "model" else status,
                             "proj_len": proj_len or "", "causal": method.endswith("causal")})
    if tmp_path is None:
        return results.to_frame(rows)
    return results.load_csv(results.write_csv(rows, tmp_path / "s.csv"))


def test_table3_transcription_matches_the_paper():
    # spot checks against the quote of Linformer Table 3 (arXiv 2006.04768)
    assert plots.TABLE3_PAPER[4096][256] == (3.2, 13)
    assert plots.TABLE3_PAPER[8192][256] == (5.0, 26)
    assert plots.TABLE3_PAPER[16384][128] == (8.6, 56)
    assert plots.TABLE3_PAPER[65536][128] == (20, 60)
    for n, row in plots.TABLE3_PAPER.items():
        for k, (time_saved, mem_saved) in row.items():
            assert k < n and time_saved >= 1 and mem_saved >= 1
        ks = sorted(row)
        assert [row[k][1] for k in ks] == sorted((row[k][1] for k in ks), reverse=True)  # smaller k saves more


def test_ratio_table(tmp_path):
    df = synthetic(tmp_path)
    mem = plots.ratio_table(df, "model_peak_fwd_bytes", methods=["exact", "linformer-k128"])
    assert list(mem.columns) == ["linformer-k128"]
    for n in (1024, 4096, 8192, 65536):
        assert mem.loc[n, "linformer-k128"] == pytest.approx(n / (8 * 128))
    tim = plots.ratio_table(df, "time_fwd")
    assert set(tim.columns) == {"linformer-k128", "performer-causal", "peer-performer-causal"}
    assert tim.loc[4096, "linformer-k128"] == pytest.approx(4096 / 512)
    assert 65536 not in tim.index  # exact ran out of memory there: no ratio, not a fake one


def test_table3_side_by_side(tmp_path):
    df = synthetic(tmp_path)
    table = plots.table3(df, proj_lens=(128,))
    assert list(table.columns) == ["proj_len=128 paper time/mem", "proj_len=128 ours time/mem"]
    assert table.loc[4096, "proj_len=128 paper time/mem"] == "3.4x / 14x"
    assert table.loc[4096, "proj_len=128 ours time/mem"] == "8x / 4x"  # 4096/512 time, 4096/1024 memory
    assert table.loc[65536, "proj_len=128 ours time/mem"] == "– / 64x"
    assert table.loc[1024, "proj_len=128 ours time/mem"] == "2x / 1x"


def test_peer_table(tmp_path):
    df = synthetic(tmp_path)
    table = plots.peer_table(df, "time_fwd")
    assert list(table.columns) == ["performer-causal"]  # the only method measured next to its peer-
    assert table["performer-causal"].to_dict() == pytest.approx({1024: 0.25, 4096: 0.25, 8192: 0.25})


def test_growth_table(tmp_path):
    df = synthetic(tmp_path)
    g = plots.growth_table(df, ["model_peak_fwd_bytes", "time_fwd"])
    assert g.loc["exact", "model_peak_fwd_bytes"] == pytest.approx(2.0)
    assert g.loc["linformer-k128", "model_peak_fwd_bytes"] == pytest.approx(1.0)
    assert g.loc["exact", "time_fwd"] == pytest.approx(2.0)  # fitted on the ok rows only
    # the registry's order (minilin.variants.ATTENTIONS), ours before the peer's
    assert list(g.index) == ["exact", "linformer-k128", "performer-causal", "peer-performer-causal"]


def test_palette_is_stable_and_distinct():
    colors = plots.palette(list(DEFAULT_METHODS))
    assert len(set(colors.values())) == len(DEFAULT_METHODS)
    assert plots.palette(["performer"])["performer"] == colors["performer"]  # independent of what else is plotted
    assert plots.palette(["boom"])["boom"]  # a name the registry does not know still gets a colour
    # a Linformer's shade depends on its own proj_len, not on which other Linformers are drawn
    alone = plots.palette(["linformer-k256"])["linformer-k256"]
    assert plots.palette(["linformer-k128", "linformer-k256"])["linformer-k256"] == alone
    assert plots.palette(["linformer-k64", "linformer-k256", "linformer-k1024"])["linformer-k256"] == alone


def test_a_line_that_stops_early_ends_in_a_marked_cross(tmp_path):
    df = synthetic(tmp_path)      # exact is out of memory at n = 65536 in time_fwd
    fig = plots.plot_curves(df, ["time_fwd"])
    ax = [a for a in fig.axes if a.get_title()][0]
    crosses = [line for line in ax.lines if line.get_marker() == "X"]
    assert len(crosses) == 1 and crosses[0].get_xdata()[0] == 8192       # the last n exact ran
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert any("line stops" in label for label in labels)
    fig = plots.plot_curves(df, ["model_peak_fwd_bytes"])                   # no method stops there: no cross
    assert not [line for a in fig.axes for line in a.lines if line.get_marker() == "X"]
    matplotlib.pyplot.close("all")


def test_plot_curves(tmp_path):
    df = synthetic(tmp_path)
    fig = plots.plot_curves(df, ["time_fwd", "model_peak_fwd_bytes", "not_a_metric"])
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["forward time (measured)", "peak memory, forward (meta model)"]
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in axes)
    assert [ax.get_ylabel() for ax in axes] == ["seconds", "bytes"]
    assert "cpu (test, 2 threads), float32" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="none of the requested metrics"):
        plots.plot_curves(df, ["nothing"])
    paths = plots.save_figures(df, str(tmp_path / "fig"))
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["fig-measured.png", "fig-model.png"]
    matplotlib.pyplot.close("all")


def test_summary_lists_failures_and_tables(tmp_path):
    text = plots.summary(synthetic(tmp_path))
    assert text.splitlines()[0] == "minilin bench: cpu (test, 2 threads), float32, B=1 H=8 D=64 m=256"
    assert "exact n=65536: oom" in text
    assert "growth exponents" in text and "Linformer Table 3" in text
    assert "ours time_fwd / the peer library's" in text


def test_line_styles_distinct_and_stable():
    styles = plots.line_styles(list(DEFAULT_METHODS))
    assert len({s["color"] for s in styles.values()}) == len(DEFAULT_METHODS)  # no two series alike
    assert plots.line_styles(["performer"])["performer"] == styles["performer"]  # a family keeps its look
    pair = plots.line_styles(["linear", "linear-causal"])
    assert pair["linear"]["color"] != pair["linear-causal"]["color"]  # same family, one figure: told apart


def test_scale_unit():
    assert plots.scale_unit("B", 5 * 2**20) == (2**20, "MiB")
    assert plots.scale_unit("B", 3 * 2**30) == (2**30, "GiB")
    assert plots.scale_unit("FLOP", 1e12) == (1e9, "GFLOP")
    assert plots.scale_unit("s", 2.0) == (1e-3, "ms")
    assert plots.scale_unit("widgets", 7) == (1.0, "widgets")


def test_plot_lines(tmp_path):
    df = synthetic(tmp_path)
    fig = plots.plot_lines(df, ["time_fwd", "model_peak_fwd_bytes", "not_a_metric"], notes=["a note"])
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["forward time (measured)", "peak memory, forward (meta model)"]
    assert [ax.get_ylabel() for ax in axes] == ["ms", "GiB"]  # exact's n^2 bytes reach 4 GiB at n = 65536
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in axes)
    lines = axes[1].get_lines()
    assert len({(line.get_color(), line.get_marker()) for line in lines}) == len(lines) == 4
    top = max(max(line.get_ydata()) for line in lines)
    assert top == pytest.approx(65536**2 / 2**30)  # values divided by the unit
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "exact", "linformer-k128", "performer-causal", "peer-performer-causal"]
    assert "a note" in [t.get_text() for t in fig.texts]
    with pytest.raises(ValueError, match="none of the requested metrics"):
        plots.plot_lines(df, ["nothing"])
    matplotlib.pyplot.close("all")


def test_plot_timing_rounds_draws_medians_and_paired_ratios():
    # two rounds: exact 1 and 3 ms at every n; causal baseline 2 ms; performer-causal 1 then 4 ms (ratios 2 and 0.5)
    samples = {("exact", n): [1e-3, 3e-3] for n in (256, 512)}
    samples |= {("sdpa-causal", n): [2e-3, 2e-3] for n in (512, 1024)}
    samples |= {("performer-causal", n): [1e-3, 4e-3] for n in (512, 1024)}
    fig = lesson_plots.plot_timing_rounds(samples, ("exact",), ("sdpa-causal", "performer-causal"), rounds=2,
                                   suptitle="test")
    first, _, ratio = fig.axes[:3]
    assert list(first.lines[0].get_xdata()) == [256, 512]
    assert list(first.lines[0].get_ydata()) == pytest.approx([2.0, 2.0])      # median of 1 and 3 ms
    assert list(ratio.lines[0].get_ydata()) == pytest.approx([1.25, 1.25])    # median of 2 and 0.5
    assert not first.collections                                                # a ratio panel: no bands beside it
    bars = ratio.collections[0].get_segments()                                  # min-max of the ratios: 0.5 to 2
    assert [tuple(seg[:, 1]) for seg in bars] == [pytest.approx((0.5, 2.0))] * 2
    assert ratio.get_ylabel() == "sdpa-causal time / method time" and fig._suptitle.get_text() == "test"
    alone = lesson_plots.plot_timing_rounds(samples, ("exact",), (), rounds=2, suptitle="test")   # one group, its panel only
    assert len(alone.axes) == 1 and list(alone.axes[0].lines[0].get_ydata()) == pytest.approx([2.0, 2.0])
    band = alone.axes[0].collections[0].get_paths()[0].vertices[:, 1]          # min-max over the rounds: 1 to 3 ms
    assert (band.min(), band.max()) == pytest.approx((1.0, 3.0))
    causal = lesson_plots.plot_timing_rounds(samples, (), ("sdpa-causal", "performer-causal"), rounds=2, suptitle="test")
    assert len(causal.axes) == 2 and list(causal.axes[1].lines[0].get_ydata()) == pytest.approx([1.25, 1.25])
    samples |= {("sdpa", n): [2e-3, 2e-3] for n in (256, 512)}   # a non-causal baseline: exact's ratios 2 and 2/3
    plain = lesson_plots.plot_timing_rounds(samples, ("exact", "sdpa"), (), rounds=2, suptitle="test", base="sdpa")
    assert len(plain.axes) == 2 and list(plain.axes[1].lines[0].get_ydata()) == pytest.approx([4 / 3, 4 / 3])
    assert plain.axes[1].get_ylabel() == "sdpa time / method time"
    matplotlib.pyplot.close("all")


def test_plot_memory_vs_n_draws_each_method_in_mib_with_slope_guides():
    panels = {"forward peak": {"exact": {256: 2**20, 512: 4 * 2**20}, "sdpa": {256: 2**20, 512: 2 * 2**20}},
              "saved": {"sdpa": {256: 2**21, 1024: 2**23}}}
    fig = lesson_plots.plot_memory_vs_n(panels, suptitle="test")
    peak, saved = fig.axes
    assert [line.get_label() for line in peak.lines[:2]] == ["exact", "sdpa"]
    assert list(peak.lines[0].get_ydata()) == pytest.approx([1.0, 4.0])       # bytes shown in MiB
    assert list(peak.lines[3].get_ydata()) == pytest.approx([0.25, 1.0])      # the n² guide, a quarter below the lowest start
    assert list(saved.lines[0].get_xdata()) == [256, 1024] and saved.get_xscale() == "log"
    matplotlib.pyplot.close("all")


def test_plot_attention_maps_shares_one_scale_and_labels():
    import torch
    labels = list("abcd")
    maps = [("head 0", torch.eye(4)), ("head 1", torch.full((4, 4), 0.25))]
    fig = lesson_plots.plot_attention_maps(maps, labels, suptitle="two heads")
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 2                                             # one image per panel, plus a colour bar
    assert {(im.norm.vmin, im.norm.vmax) for im in images} == {(0.0, 1.0)}   # one colour scale
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == labels
    assert [ax.get_title() for ax in fig.axes[:2]] == ["head 0", "head 1"]
    assert (images[0].get_array() == torch.eye(4).numpy()).all()       # the weights, not a transpose or a copy of another
    with pytest.raises(ValueError, match="3 labels"):
        lesson_plots.plot_attention_maps(maps, labels[:3])
    grid = lesson_plots.plot_attention_maps(maps * 2, labels, ncols=2)   # two rows, each with its own y-label
    shown = [ax for ax in grid.axes if ax.images]
    assert len(shown) == 4 and [ax.get_ylabel() != "" for ax in shown] == [True, False, True, False]
    matplotlib.pyplot.close("all")


def test_first_layer_weights_are_layer_0s_causal_softmax_and_the_maps_crop_them():
    import torch
    from minilin.attention import softmax_attention
    from minilin.model import LMConfig, TinyLM
    torch.manual_seed(0)
    model = TinyLM(LMConfig(block_size=8, dim=16, heads=2, depth=1, attention="exact"))
    ids = torch.randint(0, 256, (3, 8))
    w = lesson_plots.first_layer_weights(model, ids, lambda q, k, v: softmax_attention(q, k, v, causal=True))
    assert w.shape == (3, 2, 8, 8) and torch.allclose(w.sum(-1), torch.ones(3, 2, 8))    # each row: weights summing to 1
    assert (w.triu(1) == 0).all() and not torch.allclose(w[0, 0], w[0, 1])              # causal; heads differ
    assert lesson_plots.byte_labels([32, 10, 65, 0]) == ["\u2423", "\u23ce", "A", "\u00b7"]
    fig = lesson_plots.plot_causal_maps([("h", w[0, 0])], ids[0], show=4)
    shown = fig.axes[0].images[0].get_array()
    assert shown.shape == (4, 4) and shown.mask[0, 1] and not shown.mask[1, 0]        # future keys masked (grey)
    matplotlib.pyplot.close("all")


def test_chunk_tiles_colour_each_pair_by_how_the_scan_reaches_it():
    fig = lesson_plots.plot_chunk_tiles(8, 2)
    ax = fig.axes[0]
    kinds = ax.images[0].get_array()
    counts = [int((kinds == k).sum()) for k in range(3)]
    assert counts == [28, 12, 24]  # 28 future pairs; 4 tiles of 3 causal pairs; the other 24 of the 36 causal pairs
    assert kinds[1, 0] == 1 and kinds[2, 1] == 2 and kinds[0, 1] == 0 and kinds[7, 6] == 1 and kinds[7, 5] == 2
    assert len([t for t in ax.texts if t.get_text().isdigit()]) == 4  # the chunks, numbered 1..4
    assert len([c for c in ax.get_children() if type(c).__name__ == "Annotation"]) == 3  # three hand-overs of S
    assert lesson_plots.chunk_tile_kinds(5, 2)[4] == [2, 2, 2, 2, 1]  # a ragged last chunk of one token
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_plot_rank_two_ways_keeps_per_head_and_per_layer_apart():
    import pandas as pd
    markers = {0: "o", 1: "^"}
    cut = {"cut, 400": pd.DataFrame({0: [0.3, 0.5], 1: [0.4, 0.6]}, index=[8, 16]),
           "cut, 1200": pd.DataFrame({0: [0.35, 0.55], 1: [0.45, 0.65]}, index=[8, 16])}
    trained = {"at k, 400": {16: {0: 0.6, 1: 0.5}, 64: {0: 1.0, 1: 1.0}},
               "at k, 1200": {16: {0: 0.9, 1: 0.8}, 64: {0: 1.0, 1: 1.0}}}
    fig = lesson_plots.plot_rank_two_ways(cut, trained, markers=markers, chance=1 / 16, colour="tab:green")
    ax_c, ax_k = fig.axes
    assert "per head" in ax_c.get_xlabel() and "per layer" in ax_k.get_xlabel()      # two x axes, two meanings
    assert list(ax_c.get_xticks()) == [8, 16] and list(ax_k.get_xticks()) == [16, 64]
    lines = [l for l in ax_k.get_lines() if l.get_marker() not in (None, "", "None")]   # not the chance line
    assert sorted(tuple(l.get_ydata()) for l in lines)[0] == (0.5, 1.0)             # seed 1 at 400 steps, by k
    assert {l.get_color() for l in lines} == {"tab:green"}                           # one colour: one rate
    assert {l.get_linestyle() for l in lines} == {"-", "--"}                         # two step counts: two styles
    for ax in (ax_c, ax_k):                                                          # every legend entry shows a marker
        handles = ax.get_legend().legend_handles
        assert handles and all(h.get_marker() not in (None, "", "None") for h in handles)
    alone = lesson_plots.plot_rank_two_ways(cut, markers=markers, chance=1 / 16)                  # the cut panel alone
    assert len(alone.axes) == 1 and "per head" in alone.axes[0].get_xlabel()
    matplotlib.pyplot.close("all")


def test_plot_error_vs_shift_marks_non_finite_errors_at_the_ceiling():
    import math

    errors = {("a", "float64"): [1e-3, 0.0, 2.0], ("a", "float16"): [math.nan, 1e-2, math.inf],
              ("b", "float64"): [1e-16, 1e-16, 1e-16]}
    fig = lesson_plots.plot_error_vs_shift([-1, 0, 1], errors, ceiling=30.0, floor=1e-17)
    ax64, ax16 = fig.axes[:2]  # one panel per precision, one shared y axis
    assert ax64.get_title() == "float64" and ax16.get_title() == "float16" and ax64.get_yscale() == "log"
    assert ax64.get_shared_y_axes().joined(ax64, ax16)
    lines64 = {l.get_label(): l for l in ax64.get_lines()}
    assert list(lines64["a"].get_ydata()) == [1e-3, 1e-17, 2.0]  # an exact 0 at the floor
    crosses = [l for l in ax16.get_lines() if l.get_marker() == "x" and len(l.get_xdata())]  # name a's marker
    assert [(list(l.get_xdata()), list(l.get_ydata())) for l in crosses] == [([-1.1, 0.9], [30.0, 30.0])]  # name a: the top
    assert crosses[0].get_color() == lines64["a"].get_color()  # in its line's colour, nudged left of name b's
    assert not [l for l in ax64.get_lines() if l.get_marker() == "x" and len(l.get_xdata())]
    assert lines64["a"].get_linewidth() > lines64["b"].get_linewidth()  # coinciding lines both show
    assert "a: NaN or inf (drawn at the top)" in [t.get_text() for t in fig.legends[0].get_texts()]  # one legend, outside
    assert ax16.get_legend() is None and ax64.get_legend() is None
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_lesson_number_formats_and_table(capsys):
    assert lesson_plots.sig(0.012345, 2) == 0.012 and lesson_plots.bound(3e-13) == "<= 1e-12"
    assert lesson_plots.bound(2e-3) == "≈ 2e-03" and lesson_plots.reading(0.0) == "0 (exactly)"
    assert lesson_plots.reading(0.33) == "3.3e-01"
    lesson_plots.print_table({"a": (0.123, 4.0), "longer name": (0.0, 1e-5)}, ("first", "second"))
    header, row_a, row_b = capsys.readouterr().out.splitlines()
    assert header.split() == ["first", "second"] and row_a.split() == ["a", "0.12", "4.0"]
    assert row_b.split() == ["longer", "name", "0.0", "1e-05"] and len(row_a) == len(header)
