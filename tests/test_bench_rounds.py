"""minilin.bench.rounds: the interleaved timing rounds of notebook 06, checked with a fake clock (no real timing)."""
import numpy as np
import pytest

from minilin.bench import BenchConfig
import torch

from minilin.bench.rounds import attention_call, interleaved_rounds, paired, show, show_range, spread, time_attention


class FakeMachine:
    """A clock and calls whose cost is known: each call advances the clock by its cost times the machine's load,
    and the load changes from one round to the next (all cases of a round see the same load)."""

    def __init__(self, costs):
        self.now, self.load, self.log = 0.0, 1.0, []
        self.costs = costs

    def clock(self):
        return self.now

    def call(self, key):
        def run():
            self.log.append(key)
            self.now += self.costs[key] * self.load
        return run


def test_rounds_rotate_the_order_size_the_blocks_and_pair_the_ratios():
    costs = {("a", 8): 0.004, ("b", 8): 0.001, ("c", 8): 0.002, ("a", 16): 0.02}
    machine = FakeMachine(costs)
    calls = {key: machine.call(key) for key in costs}
    loads = iter([1.0, 3.0, 0.5, 2.0] * 10)

    def clock():  # the load jumps between rounds: after each full pass over the cases of length 16
        if machine.log and machine.log[-1] == ("a", 16) and len(machine.log) > 8:
            machine.load = next(loads)
        return machine.clock()

    samples = interleaved_rounds(calls, rounds=4, min_block=0.01, clock=clock)
    assert {key: len(s) for key, s in samples.items()} == {key: 4 for key in costs}
    # blocks of at least 10 ms: 3 calls of a (4 ms), 10 of b, 5 of c, 1 of a at 16
    timed = machine.log[2 * len(costs):]  # after each case's untimed and timing call
    assert timed[:18] == [("a", 8)] * 3 + [("b", 8)] * 10 + [("c", 8)] * 5
    firsts = [timed[i] for i in range(0, len(timed), 19)]  # round r starts with case r mod 3 of length 8
    assert firsts == [("a", 8), ("b", 8), ("c", 8), ("a", 8)]
    # the load changed between rounds, yet each round's ratio is the ratio of the costs
    assert np.ptp(samples["a", 8]) > 0
    assert np.allclose(paired(samples, "a", "b", 8), 4.0) and np.allclose(paired(samples, "c", "b", 8), 2.0)


def test_spread_and_show():
    ratios = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert spread(ratios) == (2.0, 3.0, 4.0)
    assert show(ratios) == "3x [2-4]"
    assert show_range(ratios) == "3x [1-5]"


def test_time_attention_times_every_case_on_one_cpu_thread_and_restores_the_count():
    cfg = BenchConfig(batch=1, heads=2, dim_head=8, nb_features=16, device="cpu", progress=False)
    before = torch.get_num_threads()
    samples = time_attention([("exact", 16), ("sdpa", 16), ("sdpa", 32)], cfg, "cpu", rounds=2, min_block=1e-4)
    assert set(samples) == {("exact", 16), ("sdpa", 16), ("sdpa", 32)}
    assert all(len(s) == 2 and min(s) > 0 for s in samples.values())
    assert torch.get_num_threads() == before


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="rounds"):
        interleaved_rounds({("a", 8): lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="min_block"):
        interleaved_rounds({("a", 8): lambda: None}, min_block=0)


def test_attention_call_runs_a_method_forward():
    cfg = BenchConfig(batch=1, heads=2, dim_head=8, nb_features=16, device="cpu", progress=False)
    samples = interleaved_rounds({("exact", 32): attention_call("exact", 32, cfg, "cpu")}, rounds=2, min_block=1e-4)
    assert len(samples["exact", 32]) == 2 and all(s > 0 for s in samples["exact", 32])


def test_machine_balance_returns_positive_finite_rates_from_the_work_it_times():
    from torch.utils.flop_counter import FlopCounterMode

    from minilin.bench.rounds import machine_balance
    matmul, copy = machine_balance("cpu", size=64, copy_numel=4096, rounds=2, min_block=1e-3)
    assert np.isfinite(matmul) and np.isfinite(copy) and matmul > 0 and copy > 0
    ticks = iter(range(10**6))  # a clock that advances one second per reading: every call then takes one second
    matmul, copy = machine_balance("cpu", size=64, copy_numel=4096, rounds=2, min_block=0.5,
                                   clock=lambda: float(next(ticks)))
    a = torch.randn(64, 64)
    with FlopCounterMode(display=False) as counter:
        torch.mm(a, a, out=torch.empty(64, 64))
    assert matmul == counter.get_total_flops() == 2 * 64**3  # FLOPs of the product it ran, per second
    assert copy == 2 * 4096 * 4                                # a float32 read and written per number


def test_where_time_goes_splits_cpu_time_and_operators():
    from minilin.bench.rounds import where_time_goes
    a = torch.randn(128, 128)
    found = where_time_goes(lambda: (a @ a).exp(), number=2)
    assert 0 <= found["system share"] <= 1 and found["faults per call"] >= 0
    assert set(found["op share"]) >= {"mm", "exp"} and abs(sum(found["op share"].values()) - 1) < 1e-9
