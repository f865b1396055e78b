"""minilin.limits: notebook 08's probes, contenders and oracles (the functions its live runs and the grid share)."""
import csv
import sys
from pathlib import Path

import pytest
import torch

from minilin import limits
from minilin.attention import softmax_attention
from minilin.linformer import linformer_attention
from minilin.lowrank import best_rank_approx
from minilin.model import TinyLM

ROOT = Path(__file__).resolve().parents[1]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def qkv(n=24, d=8, seed=0):
    g = gen(seed)
    return tuple(torch.randn(2, 3, n, d, generator=g, dtype=torch.float64) for _ in range(3))


def test_selection_oracle_is_linformer_with_a_selection_E_F():
    q, k, v = qkv()
    for kk in (5, 24):
        P = torch.zeros(kk, 24, dtype=torch.float64)
        P[torch.arange(kk), torch.arange(kk)] = 1.0
        expected = linformer_attention(q, k, v, P, P)
        torch.testing.assert_close(limits.selection_oracle(kk)(q, k, v), expected, rtol=1e-12, atol=1e-12)
    # at k = n it is exact attention; with fewer slots it is not
    torch.testing.assert_close(limits.selection_oracle(24)(q, k, v), softmax_attention(q, k, v))
    assert not torch.allclose(limits.selection_oracle(5)(q, k, v), softmax_attention(q, k, v))


def test_rank_cut_is_exact_at_full_rank_and_low_rank_below():
    q, k, v = qkv()
    torch.testing.assert_close(limits.rank_cut(24)(q, k, v), softmax_attention(q, k, v), rtol=1e-9, atol=1e-9)
    out = limits.rank_cut(3)(q, k, v)              # (B, H, N, D): a rank-3 map times v has rank <= 3
    assert int(torch.linalg.matrix_rank(out[0, 0])) <= 3 < int(torch.linalg.matrix_rank(softmax_attention(q, k, v)[0, 0]))


def test_selection_init_sets_E_and_F_to_the_first_k_positions():
    c = next(c for c in limits.copy_contenders() if c.init == "selection")
    model = TinyLM(c.model_config(limits.COPY["n"], seed=0))
    limits.selection_init_(model, generator=gen(0), noise=0.0)
    attn = model.blocks[0].attn
    for P in (attn.E, attn.F):
        k, n = P.shape
        expected = torch.zeros(k, n)
        expected[torch.arange(k), torch.arange(k)] = 1.0
        assert torch.equal(P.detach(), expected) and isinstance(P, torch.nn.Parameter)
    limits.selection_init_(model, generator=gen(0))   # default noise: close to, not equal to, the selection
    assert 0 < float((attn.E.detach() - expected).abs().max()) < 0.01


def test_swapped_mix_restores_the_layer_and_score_uses_it():
    c = limits.Contender("exact")
    model = TinyLM(c.model_config(32, seed=0)).eval()
    task = limits.SpanCopy(seq_len=32, span_len=8, alphabet=16)
    attn = model.blocks[0].attn
    base = limits.score(model, task)
    zeros = limits.score(model, task, mix=lambda q, k, v, **kw: torch.zeros_like(v))
    assert "mix" not in vars(attn) and limits.score(model, task) == base
    with limits.swapped_mix(attn, lambda q, k, v, **kw: 0 * v):
        assert "mix" in vars(attn)
    assert "mix" not in vars(attn) and 0.0 <= zeros <= 1.0


def test_contenders_are_valid_configs_with_grids():
    for contenders, n in ((limits.copy_contenders(), limits.COPY["n"]), (limits.recall_contenders(), limits.RECALL["n"]),
                          (limits.gated_recall_contenders(), limits.RECALL["n"]),
                          (limits.small_state_recall_contenders(), limits.RECALL["n"]),
                          (limits.low_lr_recall_contenders(), limits.RECALL["n"])):
        names = [c.name for c in contenders]
        assert len(set(names)) == len(names)
        for c in contenders:
            assert len(c.grid) >= 2 or c.grid == ((limits.LOW_LR, 1.0),)   # the low-lr grid adds one point to LRS
            cfg = limits.config(c, n=n, batch=2, steps=1, eval_every=1, lr=c.grid[0][0], seed=0)
            cfg.validate()
    ks = [c.proj_len for c in limits.copy_contenders() if c.attention == "linformer" and c.init == "default"]
    assert min(ks) < limits.COPY["span"] <= max(ks)        # k below the span and at or above it
    assert any(ef != 1.0 for c in limits.copy_contenders() for _, ef in c.grid)   # E/F's lr is in a grid
    assert all(c.causal for c in limits.recall_contenders() if c.attention != "linformer")
    assert {"exact", "attention off"} <= {c.name for c in limits.recall_contenders()}


def test_small_state_contenders_change_only_the_head_size_and_the_hybrid_has_its_control():
    small = {c.name: c.model_config(limits.RECALL["n"], 0) for c in limits.small_state_recall_contenders()}
    base = limits.Contender("deltanet", "deltanet", causal=True).model_config(limits.RECALL["n"], 0)
    cfg = small[f"deltanet, d_h={limits.SMALL_STATE}"]
    assert cfg.head_dim() == limits.SMALL_STATE < base.head_dim() == limits.MODEL["dim"] // limits.MODEL["heads"]
    assert (cfg.dim, cfg.depth, cfg.heads, cfg.positions) == (base.dim, base.depth, base.heads, base.positions)
    hybrid = small[f"hybrid gated-deltanet + exact, d_h={limits.SMALL_STATE}"]
    control = small[f"gated-deltanet x2, d_h={limits.SMALL_STATE}"]
    assert hybrid.depth == control.depth == 2 and hybrid.layer_attention() == ["gated-deltanet", "sdpa"]
    assert control.layer_attention() == ["gated-deltanet", "gated-deltanet"]
    model = TinyLM(hybrid)
    assert [type(b.attn).__name__ for b in model.blocks] == ["GatedDeltaNetSelfAttention", "ExactSelfAttention"]


def test_run_is_deterministic_and_selection_init_changes_the_start():
    task = limits.SpanCopy(seq_len=32, span_len=15, alphabet=16)
    sizes = dict(batch=4, steps=4, eval_every=2)
    c = limits.Contender("Linformer k=16", "linformer", proj_len=16)
    a = limits.run(c, task, sizes, lr=3e-3, seed=1)
    b = limits.run(c, task, sizes, lr=3e-3, seed=1)
    assert a.val_acc == b.val_acc and a.loss == b.loss
    s = limits.run(limits.Contender("sel", "linformer", proj_len=16, init="selection"), task, sizes, lr=3e-3, seed=1)
    assert s.loss[0] != a.loss[0]
    rows = limits.curve_rows(a, c, task.name, lr=3e-3, ef_lr_scale=1.0, seed=1)
    assert [r["step"] for r in rows] == a.eval_step and rows[0]["model"] == "Linformer k=16"
    with pytest.raises(ValueError, match="unknown init"):
        limits.run(limits.Contender("x", "linformer", proj_len=4, init="identity"), task, sizes, lr=3e-3)


@pytest.mark.parametrize("name", ["copy", "recall", "recall-gated", "recall-small", "recall-low-lr"])
def test_committed_grid_covers_every_contender_grid_point_and_seed(name):
    path = ROOT / "results" / "reference" / f"limits_{name.replace('-', '_')}.csv"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `python tests/limits_runs.py {name}`")
    text = path.read_text()
    assert "command: python tests/limits_runs.py" in text and "machine:" in text
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    sys.path.insert(0, str(ROOT / "tests"))
    import limits_runs
    expected = {(t.name, c.name, f"{lr}", f"{ef}", f"{seed}") for t, _, c, lr, ef, seed in limits_runs.runs(name)}
    got = {(r["task"], r["model"], r["lr"], r["ef_lr_scale"], r["seed"]) for r in rows if r["measure"] == "val_acc"}
    assert got == expected


def test_load_copy_grid_keeps_the_latest_run_and_finds_best_points(tmp_path):
    head = "task,model,lr,ef_lr_scale,seed,measure,r,step,val_acc,params,train_s\n"
    t = limits.copy_task().name
    row = lambda m, lr, ef, s, step, acc, measure="val_acc", r="": f'"{t}",{m},{lr},{ef},{s},{measure},{r},{step},{acc},1,1\n'
    one = "# command: x\n" + head + "".join(row("a", lr, 1.0, s, st, acc) for lr, acc in ((1e-3, 0.2), (3e-3, 0.5))
                                           for s in (0, 1, 2) for st, acc in ((50, 0.1), (100, acc)))
    two = head + "".join(row("a", 1e-3, 1.0, s, st, 0.9) for s in (0, 1, 2) for st in (50, 100))   # a re-run
    two += row("a", 3e-3, 1.0, 0, 100, 0.4, "rank_cut", 16) + row("a", 3e-3, 1.0, 0, 100, 0.5, "rank_cut", 32)
    (tmp_path / "limits_copy.csv").write_text(one)
    (tmp_path / "limits_copy_fixes.csv").write_text(two)
    (tmp_path / "limits_copy_edges.csv").write_text(head)
    grid = limits.load_copy_grid(tmp_path)
    assert grid.seeds_at("a") == ({0: 0.9, 1: 0.9, 2: 0.9}, 1e-3)          # the later file's run wins, then the best
    assert grid.seeds_at("a", lr=3e-3)[0] == {0: 0.5, 1: 0.5, 2: 0.5}
    assert grid.curve("a", 1e-3, 2) == ([50, 100], [0.9, 0.9])
    assert grid.rank_cuts("a", 3e-3).loc[32, 0] == 0.5
    with pytest.raises(ValueError, match="no committed copy run"):
        grid.seeds_at("b")
    with pytest.raises(FileNotFoundError, match="limits_runs.py"):
        limits.load_copy_grid(tmp_path / "nowhere")


def test_the_committed_copy_grid_loads_with_its_rank_cuts():
    grid = limits.load_copy_grid()
    assert min(grid.seeds_at("exact, 2 layers")[0].values()) >= 0.95
    cuts = grid.rank_cuts("Linformer k=64, selection init", 3e-3)
    assert list(cuts.index) == [8, 16, 32, 48, 63] and list(cuts.columns) == [0, 1, 2]
    assert set(limits.load_recall_grid()) == {(c.name, p) for c in limits.scattered_recall_contenders()
                                              for p in limits.RECALL_HARD["pairs"]}


def test_the_committed_copy_grids_best_points_are_interior_and_the_sweep_task_is_solvable():
    """Notebook 08's grid checks, kept here out of the learner's path: where a best point sat on the edge of its
    learning-rate grid, the rate beyond the edge (limits_copy_edges.csv) is worse, so the best point is interior; and
    two exact blocks copy at every span of the rank sweep (the task is solvable where k = 16 falls short)."""
    grid = limits.load_copy_grid()
    mean_at = lambda model, lr: sum(grid.seeds_at(model, lr=lr)[0].values()) / 3
    for k in (16, 32, 48, 64):
        assert grid.seeds_at(f"Linformer k={k}")[1] == 3e-3
        assert mean_at(f"Linformer k={k}", 1e-3) < mean_at(f"Linformer k={k}", 3e-3)
    assert mean_at("Linformer k=32, selection init", 3e-2) < mean_at("Linformer k=32, selection init", 1e-2)
    for span in limits.SWEEP["spans"]:
        acc = grid.seeds_at("exact, 2 layers", limits.copy_task(span).name, lr=limits.SWEEP["lr"])[0]
        assert min(acc.values()) >= 0.95, (span, acc)


def test_committed_long_copy_runs_cover_every_k_and_seed_and_say_how_they_were_made():
    """limits_copy_long.csv (notebook 08, section 5 and the controls appendix): k = 16, 32, 64 from the selection start, 3 seeds, to the
    steps its header states, and the k = 64 model's per-head rank cuts."""
    path = ROOT / "results" / "reference" / "limits_copy_long.csv"
    text = path.read_text()
    assert "command: python tests/limits_copy_long.py --probe" in text and "machine:" in text and "'steps': 1200" in text
    g = limits.read_grid("limits_copy_long.csv")
    last = g[(g.measure == "val_acc") & (g.step == 1200)]
    assert {(m, s) for m, s in zip(last.model, last.seed)} == {
        (f"Linformer k={k}, selection init", s) for k in (16, 32, 64) for s in (0, 1, 2)}
    cuts = g[g.measure == "rank_cut"]
    assert set(cuts.model) == {"Linformer k=64, selection init"} and sorted(set(cuts.r)) == [16, 32, 63]
    assert len(cuts) == 9


def test_committed_k16_runs_at_lr_1e2_cover_three_seeds_and_say_how_they_were_made():
    """limits_copy_long_lr1e-2.csv (notebook 08, section 5): k = 16 from the selection start at lr 0.01, 1200 steps,
    seeds 0, 1, 2; the notebook's headline reads it."""
    path = ROOT / "results" / "reference" / "limits_copy_long_lr1e-2.csv"
    text = path.read_text()
    assert "command: python tests/limits_copy_long.py --ks 16 --lr 0.01" in text and "machine:" in text
    g = limits.read_grid("limits_copy_long_lr1e-2.csv")
    last = g[(g.measure == "val_acc") & (g.step == 1200)]
    assert set(last.model) == {"Linformer k=16, selection init"} and sorted(last.seed) == [0, 1, 2]
    assert set(g.lr) == {0.01}
    assert sorted(round(a, 3) for a in last.val_acc) == [0.648, 0.937, 0.993]   # the three finals notebook 08 states
    assert "--decode" in text                  # section 4's argmax decode of each model's own map, per seed
    dec = g[g.measure.str.startswith("decode")].pivot(index="seed", columns="measure", values="val_acc")
    assert list(dec.index) == [0, 1, 2] and list(dec.columns) == ["decode_head0", "decode_head1", "decode_sum"]
    assert dec.loc[0, "decode_sum"] < float(last[last.seed == 0].val_acc.iloc[0]) - 0.3


def test_committed_k16_runs_carry_section_5_probes_for_both_rates():
    """Both 1200-step files carry, for each k = 16 run, its accuracy with A or F V from another input, A its batch
    mean, and only F's span (other) columns kept (tests/limits_copy_long.py --probe): notebook 08's section 5 table."""
    probes = {"probe_A_other", "probe_FV_other", "probe_A_mean", "probe_F_span_only", "probe_F_rest_only"}
    for name in ("limits_copy_long.csv", "limits_copy_long_lr1e-2.csv"):
        assert "--probe" in (ROOT / "results" / "reference" / name).read_text().splitlines()[0]
        g = limits.read_grid(name)
        g = g[(g.model == "Linformer k=16, selection init") & g.measure.str.startswith("probe_")]
        assert set(g.measure) == probes and sorted(set(g.seed)) == [0, 1, 2] and len(g) == 15 and set(g.step) == {1200}
        assert g.val_acc.between(0, 1).all()


def test_committed_alphabet52_runs_cover_three_seeds_and_say_how_they_were_made():
    """limits_copy_alphabet52.csv (notebook 08, controls appendix): k = 16 from the selection start, 52 letters
    instead of 16, lr 0.003, 1200 steps, seeds 0, 1, 2, each above the routed-slot score for 52 letters."""
    text = (ROOT / "results" / "reference" / "limits_copy_alphabet52.csv").read_text()
    assert "command: python tests/limits_copy_long.py --ks 16 --alphabet 52" in text and "'alphabet': 52" in text
    g = limits.read_grid("limits_copy_alphabet52.csv")
    last = g[(g.measure == "val_acc") & (g.step == 1200)]
    assert set(last.model) == {"Linformer k=16, selection init, alphabet=52"} and sorted(last.seed) == [0, 1, 2]
    assert set(g.lr) == {limits.SWEEP["lr"]} and all(last.val_acc > 16 / 63 + 47 / 63 / 52 + 0.3)


def test_answer_rows_first_occurrence_copies_and_int_cuts_to_rank_r():
    """'first': each answer slot reads its value's first occurrence in the span (rank <= distinct letters), so the
    answer rows of the output are the sources' values; an int r: those rows of the map cut to their best rank-r."""
    S, n, span_letters = 12, 30, torch.tensor([[0, 1, 0, 2, 1, 3, 3, 0, 2, 1, 0, 3], [4, 4, 4, 1, 1, 2, 0, 0, 4, 2, 1, 0]])
    table = torch.randn(5, 8, generator=gen(1), dtype=torch.float64)
    tokens = torch.cat([span_letters, torch.randint(5, (2, n - S), generator=gen(2))], 1)
    v = table[tokens][:, None].expand(2, 3, n, 8)                                     # a value depends on its token
    q, k, _ = qkv(n=n)
    layer = object()                                                                  # no projections: exact map
    out = limits.answer_rows(layer, S, "first")(q, k, v)
    assert torch.equal(out[..., -S:, :], v[..., :S, :])
    P = limits.effective_map(layer, q, k)
    assert torch.allclose(out[..., :-S, :], (P @ v)[..., :-S, :])
    cut = limits.answer_rows(layer, S, 2)(q, k, v)
    assert torch.allclose(cut[..., -S:, :], best_rank_approx(P[..., -S:, :], 2) @ v)
    assert not torch.allclose(cut[..., -S:, :], (P @ v)[..., -S:, :])


def test_map_decode_reads_each_heads_answer_rows_by_argmax(monkeypatch):
    """Head 0's map an exact copy, head 1's all zeros (every slot reads token 0): decode 1, the share of 0s, 1."""
    cfg = limits.config(limits.sweep_contenders()[1], n=16, batch=2, steps=1, eval_every=1, lr=1e-3)
    model = TinyLM(cfg.model)
    S, n = 5, 16
    x = torch.randint(4, (3, n), generator=gen(3))

    def copy_and_zero(attn, q, k):
        P = torch.zeros(q.shape[0], 2, n, n, dtype=torch.float64)
        P[:, 0, torch.arange(n - S, n), torch.arange(S)] = 1.0
        return P.to(q.dtype)
    monkeypatch.setattr(limits, "effective_map", copy_and_zero)
    head0, head1, both = limits.map_decode(model, x, S)
    assert head0 == 1.0 and both == 1.0 and head1 == pytest.approx(float((x[:, :S] == 0).double().mean()))


def test_rank_two_ways_reads_the_controls_from_the_committed_runs():
    """Notebook 08's controls appendix: cuts and trained-at-k scores at 400 and 1200 steps."""
    cut, trained = limits.rank_two_ways(limits.load_copy_grid())
    assert list(cut) == [400, 1200] and list(trained) == [400, 1200]
    assert list(cut[1200].index) == [16, 32, 63] and list(cut[1200].columns) == [0, 1, 2] and 48 in cut[400].index
    assert all(sorted(trained[t][k]) == [0, 1, 2] for t in trained for k in (16, 32, 64))
    assert trained[1200][64] == {0: 1.0, 1: 1.0, 2: 1.0} and min(trained[1200][16].values()) > max(trained[400][16].values())


def test_long_k16_reads_section_5s_curves_and_decodes():
    """Notebook 08's section 5: k = 16 curves at two rates, to step 1200, and the lr 0.01 models' own-map decodes."""
    curves, decode = limits.long_k16()
    assert list(curves) == [3e-3, 1e-2] and all(sorted(c) == [0, 1, 2] for c in curves.values())
    for runs in curves.values():
        for steps, acc in runs.values():
            assert steps == sorted(steps) and steps[-1] == 1200 and len(acc) == len(steps)
    assert sum(acc[-1] >= 0.95 for _, acc in curves[1e-2].values()) == 1
    assert sorted(decode) == ["head0", "head1", "sum"] and all(sorted(d) == [0, 1, 2] for d in decode.values())
    assert decode["sum"][0] < curves[1e-2][0][1][-1] - 0.3                 # the map's argmax decodes far less


def test_width_k16_reads_the_committed_head_width_runs():
    """limits_copy_width.csv (notebook 08, appendix: probes of the 1200-step model): the lr 0.01 k = 16 recipe with heads of 8 and 16 dimensions,
    seeds 0, 1, 2, 1200 steps; width_k16 adds MODEL's 32 from limits_copy_long_lr1e-2.csv."""
    text = (ROOT / "results" / "reference" / "limits_copy_width.csv").read_text()
    assert "command: python tests/limits_copy_long.py --ks 16 --lr 0.01 --dim-head 8" in text and "--dim-head 16" in text
    assert "machine:" in text and "'steps': 1200" in text
    width = limits.width_k16()
    assert list(width) == [8, 16, 32] and all(sorted(a) == [0, 1, 2] for a in width.values())
    assert width[32] == {s: a[-1] for s, (_, a) in limits.long_k16()[0][1e-2].items()}
    assert max(width[8].values()) < min(width[32].values())            # the notebook's "narrower heads end lower"


def test_run_on_the_cpu_trains_in_one_thread_and_restores_the_count(monkeypatch):
    # the committed grids were trained in one thread; with more, notebook 08's lr 0.01 run ends elsewhere
    seen = []

    def fake_train(cfg, **kwargs):
        seen.append(torch.get_num_threads())
        raise KeyboardInterrupt   # an interrupted run must leave the thread count as it was

    monkeypatch.setattr(limits, "train", fake_train)
    task, before = limits.copy_task(), torch.get_num_threads()
    contender = limits.copy_contenders()[0]
    torch.set_num_threads(2)
    try:
        for device, threads in (("cpu", 1), ("meta", 2)):
            with pytest.raises(KeyboardInterrupt):
                limits.run(contender, task, limits.COPY, lr=0.01, device=device)
            assert seen[-1] == threads and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
