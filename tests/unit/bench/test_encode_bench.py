"""The encoder placement benchmark's parts: its baselines, its workload, and the issue's targets on
the metadata figures. The benchmark's run (a four-process world) is tests/e2e/bench/test_encode_bench.py."""

from __future__ import annotations

import numpy as np
import pytest

from vlrl.bench.encode_baselines import contiguous_ranks, lpt_ranks, optimal_imbalance, over_lower_bound
from vlrl.bench.encode_figures import measure
from vlrl.bench.encode_workload import (
    RULE,
    SCREENS,
    VIT_7B,
    WORLD4_LAYOUTS,
    Workload,
    build_metas,
    draw_trajectories,
    fake_item,
)

WORLD = 4
TOP_LEVEL = (
    "imbalance_planner", "imbalance_lpt", "imbalance_contiguous", "imbalance_token_owner", "fetch_ratio",
    "a2a_over_allgather", "a2a_over_padded_allgather", "owner_local_fraction", "owner_local_fraction_no_pref",
    "local_row_fraction", "local_row_fraction_no_pref", "imbalance_planner_2pr", "imbalance_lpt_2pr",
    "planner_over_lpt_2pr", "imbalance_optimum_2pr", "planner_over_optimum_2pr", "imbalance_lpt_sp",
    "imbalance_vs_lower_bound", "imbalance_vs_lower_bound_2pr", "dedup_saving",
)  # fmt: skip


@pytest.mark.parametrize(
    "costs, k, expected",
    [
        ([4, 1, 1, 1, 1], 2, [0, 1, 1, 1, 1]),  # rank 0 reaches the target 8/2 with its first image
        ([1, 1, 1, 1, 4], 2, [0, 0, 0, 0, 1]),  # ... or only after four
        ([5, 5, 5], 3, [0, 1, 2]),
        ([9, 1, 1], 3, [0, 1, 2]),  # the greedy would take all three; one is left for each rank
        ([1, 2], 4, [2, 3]),  # more ranks than images: verl keeps one for each later rank, the first get none
    ],
)
def test_contiguous_runs_follow_verls_greedy_rule(costs, k, expected):
    ranks = contiguous_ranks(np.array(costs, dtype=float), k)
    assert ranks.tolist() == expected
    assert np.all(np.diff(ranks) >= 0)  # runs in order


def test_optimal_imbalance_tries_every_assignment():
    assert optimal_imbalance(np.array([3.0, 3.0, 2.0, 2.0, 2.0]), 2) == pytest.approx(6 / 6)
    assert optimal_imbalance(np.array([5.0, 1.0, 1.0, 1.0]), 2) == pytest.approx(5 / 4)
    assert optimal_imbalance(np.ones(30), 4) is None  # too many to try


def test_lpt_puts_the_costliest_first_on_the_least_loaded_rank():
    assert lpt_ranks(np.array([3.0, 3.0, 2.0, 2.0, 2.0]), 2).tolist() == [0, 1, 0, 1, 0]


@pytest.mark.parametrize(
    "costs, loads, expected",
    [
        ([9, 1, 1], [9, 1, 1], 1.0),  # the largest image bounds the step: nothing beats 9
        ([9, 1, 1], [10, 1, 0], 10 / 9),
        ([3, 3, 2, 2, 2], [6, 6], 1.0),  # total / ranks bounds it
        ([3, 3, 2, 2, 2], [7, 5], 7 / 6),
    ],
)
def test_over_lower_bound_divides_by_the_larger_of_largest_item_and_mean(costs, loads, expected):
    assert over_lower_bound(np.array(loads, dtype=float), np.array(costs, dtype=float)) == pytest.approx(expected)


def test_compare_rows_flags_a_misplaced_row_and_a_wrong_shape():
    import torch

    from vlrl.bench.encode_wall import TOLERANCE, compare_rows

    want = [torch.arange(12.0).reshape(4, 3), torch.zeros(0, 3)]
    assert compare_rows([w.clone() for w in want], want).tolist() == [0.0, 0.0, 0.0]
    swapped = want[0][[1, 0, 2, 3]]  # two rows delivered in each other's place
    assert compare_rows([swapped, want[1]], want)[0] == 1.0
    nudged = want[0].clone()
    nudged[0, 0] += TOLERANCE / 10  # within tolerance: batching may change float sums
    off, shape_bad, diff = compare_rows([nudged, want[1]], want)
    assert (off, shape_bad) == (0.0, 0.0) and diff == pytest.approx(TOLERANCE / 10, rel=1e-3)
    assert compare_rows([want[0][:3], want[1]], want)[:2].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("seed", range(3))
def test_trajectories_hold_the_asked_images_on_one_device_each(seed):
    trajectories = draw_trajectories(37, seed)
    ids = [i for t in trajectories for i in t.images]
    assert len(ids) == len(set(ids)) == 37
    assert all(1 <= len(t.images) <= 10 for t in trajectories)
    metas = build_metas(trajectories, Workload(), lambda i, s: fake_item(i, s, Workload(), seed), seed)
    for meta in metas:
        assert len({(m.width, m.height) for m in meta.images}) == 1
        assert meta.num_tokens <= Workload().budget
    shared = draw_trajectories(200, seed, group_size=8, share_first=True)
    for t in shared:
        assert t.images[0] == next(u for u in shared if u.group == t.group).images[0]


def test_screens_are_skewed_in_encoder_cost():
    costs = [VIT_7B(RULE.grid(*size)) for size, _ in SCREENS.values()]
    assert max(costs) / min(costs) > 5


def test_metadata_figures_meet_the_issue_targets():
    result = measure(WORLD4_LAYOUTS, (2, 8, 32), seeds=(0, 1, 2))
    for key in TOP_LEVEL:
        assert key in result, key
    assert result["imbalance_planner"] <= 1.05  # worst instance with 8 or more images per rank
    assert result["planner_over_optimum_2pr"] <= 1 + 1e-9  # optimal at 2 per rank (all assignments tried)
    assert result["imbalance_planner"] < result["imbalance_contiguous"]
    assert result["vs_lower_bound"]["ipr32"]["planner"] <= 1.01  # within 1% of what no assignment beats
    for k, schemes in result["vs_lower_bound"].items():  # the per-replica baselines balance worse
        assert schemes["planner"] < min(schemes["contiguous_sp"], schemes["lpt_sp"]), k
    assert result["fetch_ratio"] <= 1.6 / WORLD  # the busiest rank reads little more than its share
    assert result["a2a_over_allgather"] < 0.5 and result["a2a_over_padded_allgather"] < 0.5
    assert result["owner_local_fraction"] > result["owner_local_fraction_no_pref"]  # the preference acts
