"""results/reference/lm_swap_*.csv (notebook 07's stored runs): what the notebook's section 7 and appendices
say about them, checked on the files themselves."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def runs(name, index):
    frame = pd.read_csv(REFERENCE / name, comment="#")
    return frame.pivot(index=index, columns="mixing", values="val_bits_per_byte")


def claims(grid):
    """The appendix's statements about its rate grid, a (lr, seed) x mixing table; the failed ones by name."""
    lo, hi = grid.groupby("lr").min(), grid.groupby("lr").max()
    checks = {
        "no run ends in NaN": grid.notna().all().all(),
        "1e-2 is every model's best rate": (grid.groupby("lr").mean().idxmin() == 0.01).all(),
        "linear behind exact on every seed, every rate": (lo["linear"] > hi["exact"]).all(),
        "exact and the previous-byte read overlap at 1e-2":
            lo.loc[0.01, "exact"] < hi.loc[0.01, "previous"] and lo.loc[0.01, "previous"] < hi.loc[0.01, "exact"],
        "linear behind the previous-byte read on every seed, every rate": (lo["linear"] > hi["previous"]).all(),
    }
    return [name for name, ok in checks.items() if not ok]


def test_the_rate_grid_says_what_the_appendix_says():
    grid = runs("lm_swap_lr_grid.csv", ["lr", "seed"])
    assert claims(grid) == []
    assert grid.loc[0.003].equals(runs("lm_swap_seeds.csv", "seed"))     # section 7's stored seeds are its 3e-3 rows


def test_the_claims_can_fail():
    grid = runs("lm_swap_lr_grid.csv", ["lr", "seed"])
    broken = grid.copy()
    broken.loc[(0.001, 0), "linear"] = 2.0                                # one linear seed ahead of exact
    assert "linear behind exact on every seed, every rate" in claims(broken)
    broken.loc[(0.01, 1), "exact"] = float("nan")
    assert "no run ends in NaN" in claims(broken)


def test_longer_runs_start_from_the_stored_seeds():
    long = runs("lm_swap_long.csv", ["step", "seed"])
    seeds = runs("lm_swap_seeds.csv", "seed")
    gap = long["linear"] - long["exact"]
    for m in ("exact", "linear"):
        assert (long.loc[400, m] - seeds[m]).abs().max() < 0.05             # step 400 of the same runs
    assert (gap > 0).all() and gap.groupby("step").mean().is_monotonic_decreasing   # the gap shrinks, stays > 0


def test_the_two_byte_control_is_the_same_recipe():
    short = pd.read_csv(REFERENCE / "lm_swap_seeds_twobytes.csv", comment="#").set_index("seed")
    long = pd.read_csv(REFERENCE / "lm_swap_long_twobytes.csv", comment="#").pivot(index="step", columns="seed",
                                                                                   values="val_bits_per_byte")
    assert list(short.index) == [0, 1, 2] and set(short["mixing"]) == {"twobytes"} and set(short["lr"]) == {0.003}
    assert list(long.index) == [400, 800, 1200, 1600] and long.notna().all().all()
    assert (long.loc[400] - short.loc[long.columns, "val_bits_per_byte"]).abs().max() < 0.05   # step 400 of the same runs

    seeds = runs("lm_swap_long.csv", ["step", "seed"])["exact"].unstack("seed")
    ahead = long - seeds[long.columns]                                   # the fixed read minus exact, seed by seed
    assert (ahead.loc[400] > 0).all() and (ahead.loc[1600] > 0.3).all()  # the appendix's claims


def test_the_notebooks_seed_0_run_is_the_stored_one():
    """Notebook 07's stored section-7 output (one CPU thread, seed 0) against lm_swap_seeds.csv's seed-0 rows."""
    cells = json.loads((REFERENCE.parents[1] / "notebooks" / "07_tiny_lm.ipynb").read_text())["cells"]
    text = "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c["outputs"])
    line = re.search(r"exact attention ([\d.]+), attention off ([\d.]+), linear attention \(elu\+1\) ([\d.]+), "
                     r"one-layer fixed read \(byte t-1\) ([\d.]+) bits", text)
    seed0 = runs("lm_swap_seeds.csv", "seed").loc[0]
    read0 = pd.read_csv(REFERENCE / "lm_swap_seeds_twobytes.csv", comment="#").set_index("seed").loc[0]
    for value, stored in zip(line.groups(), (seed0["exact"], seed0["off"], seed0["linear"], read0["val_bits_per_byte"])):
        assert abs(float(value) - stored) <= 0.01, (value, stored)


if __name__ == "__main__":
    pytest.main([__file__])
