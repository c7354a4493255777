"""The planner benchmark's parts: the figures it reports, the 64k-sequence plan it times, and verl's
KK beside it. The benchmark's run is tests/e2e/bench/test_pack_bench.py."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from vlrl.bench import external_kk
from vlrl.bench.pack_bench import draw_lengths, exact, lower_bound, measure, optimum, regimes
from vlrl.pack import MicroBatchPlanner


def test_lengths_are_skewed_gui_trajectories():
    lengths = draw_lengths(10_000, seed=0)
    assert lengths.min() >= 1024 and lengths.max() <= 32768
    assert 3000 < float(sorted(lengths)[5000]) < 5500  # median ~4k
    assert (lengths >= 16384).mean() > 0.02  # a long tail


@pytest.mark.parametrize("seed", range(3))
def test_small_measure(seed):
    result = measure(2048, dp=8, budget=65536, seed=seed)
    assert result["imbalance_planner"] <= result["imbalance_kk"] + 1e-9
    assert result["imbalance_planner"] <= result["imbalance_external_kk"] + 1e-9  # verl's code, not our seed
    assert result["imbalance_planner"] < result["imbalance_naive"]
    assert 0.5 < result["fill"] <= 1
    assert result["empty_micro_batches"] == 0


def test_plans_16k_sequences_at_least_as_balanced_as_kk():
    """How fast it plans is ``vlrl bench pack``'s figure (64k sequences), not a bound here."""
    result = measure(16384, dp=8, budget=65536, seed=0, external=False)
    plan_s, kk_s = result["plan_seconds"]["median"], result["kk_seconds"]["median"]
    print(
        f"\n16k sequences, dp=8: planned in {plan_s:.3f} s (KK alone {kk_s:.3f} s);"
        f" imbalance planner {result['imbalance_planner']:.12f}, KK {result['imbalance_kk']:.12f},"
        f" naive {result['imbalance_naive']:.6f}; {result['micro_batches']} micro-batches per rank,"
        f" fill {result['fill']:.4f}, step imbalance {result['step_imbalance']:.6f}"
    )
    assert result["imbalance_planner"] <= result["imbalance_kk"] + 1e-9 < result["imbalance_naive"]


def test_the_external_kk_is_verls_partition_scored_on_the_real_costs():
    """The figure is the imbalance of the partition verl returns, on float costs it only saw as ints."""
    result = measure(1024, dp=8, budget=65536, seed=0)  # the smoke headline case
    costs = MicroBatchPlanner.Config().build().cost_model.sequence_costs(draw_lengths(1024, seed=0))
    parts = external_kk.verl_partitions(costs, 8)
    assert len(parts) == 8 and sorted(i for part in parts for i in part) == list(range(1024))
    totals = np.array([costs[part].sum() for part in parts])
    assert result["imbalance_external_kk"] == pytest.approx(totals.max() / totals.mean(), abs=1e-9)
    scaled = np.array([sum(round(c * external_kk.SCALE) for c in costs[part]) for part in parts], dtype=np.float64)
    # What verl balanced (the scaled ints) is the real costs' balance to 1e-9.
    assert scaled.max() / scaled.mean() == pytest.approx(totals.max() / totals.mean(), abs=1e-9)
    assert result["imbalance_planner"] <= result["imbalance_external_kk"] + 1e-9


def test_a_missing_verl_fails_the_bench_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl.utils.seqlen_balancing", None)  # import raises ImportError
    with pytest.raises(RuntimeError, match="pip install --no-deps verl==0.9.1"):
        measure(64, dp=8, budget=65536, seed=0)


def test_the_exhaustive_optimum_and_the_lower_bound_on_hand_made_cases():
    assert optimum(np.array([3.0, 3, 2, 2, 2]), 2) == 6  # {3,3} {2,2,2}; greedy (largest first) gets 7
    assert optimum(np.array([5.0, 1, 1, 1]), 3) == 5
    assert lower_bound(np.array([5.0, 1, 1, 1]), 3) == 5 / (8 / 3)


def test_planner_and_kk_against_the_optimum_and_the_hard_regimes():
    figures = exact(cases=4)
    assert figures["planner_over_optimum_mean"] >= 1 - 1e-12  # below 1: the search missed a better assignment
    assert figures["external_kk_over_optimum_mean"] >= 1 - 1e-12  # the same against code vlrl did not write
    assert figures["planner_over_optimum_max"] < 1.1  # the planner within 10% of the optimum on every case
    by_shape = {(p["dp"], p["sequences_per_rank"]): p for p in regimes(dps=(8, 32), per_rank=(2, 16))}
    # Two sequences per rank: the longest sequence alone sets the step, and the planner must put it alone.
    assert by_shape[8, 2]["imbalance_planner"] == pytest.approx(by_shape[8, 2]["imbalance_lower_bound"], rel=1e-9)
    # Sixteen per rank: totals balance almost perfectly, yet the micro-batches in lockstep do not.
    assert by_shape[32, 16]["imbalance_planner"] < 1.01 < by_shape[32, 16]["lockstep_imbalance"]
