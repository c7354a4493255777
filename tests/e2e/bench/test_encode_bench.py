"""``vlrl bench encode`` at smoke size, in this process (its four ranks spawned): every scheme's
figures and the issue's targets. Its baselines and workload are tests/unit/bench/test_encode_bench.py."""

from __future__ import annotations


WORLD = 4
TOP_LEVEL = (
    "imbalance_planner", "imbalance_lpt", "imbalance_contiguous", "imbalance_token_owner", "fetch_ratio",
    "a2a_over_allgather", "a2a_over_padded_allgather", "owner_local_fraction", "owner_local_fraction_no_pref",
    "local_row_fraction", "local_row_fraction_no_pref", "imbalance_planner_2pr", "imbalance_lpt_2pr",
    "planner_over_lpt_2pr", "imbalance_optimum_2pr", "planner_over_optimum_2pr", "imbalance_lpt_sp",
    "imbalance_vs_lower_bound", "imbalance_vs_lower_bound_2pr", "dedup_saving",
)  # fmt: skip
MEASURED = (
    "speedup_vs_token_owner", "speedup_vs_allgather_sp", "speedup_vs_padded_allgather_sp",
    "a2a_bytes_measured", "allgather_sp_bytes_measured", "a2a_over_allgather_sp_measured", "outputs_match", "dedup",
)  # fmt: skip


def test_vlrl_bench_encode_measures_every_scheme_in_a_four_process_world():
    from tests.helpers.run_bench import run_bench

    result = run_bench("encode", size="smoke")
    for key in (*TOP_LEVEL, *MEASURED):
        assert key in result, key
    assert result["imbalance_planner"] <= 1.05
    assert result["imbalance_vs_lower_bound"] <= 1.05
    assert result["outputs_match"]
    assert set(result["wall"]) == {"1x2x2", "2x2x1"}
    for name, figures in result["wall"].items():
        # Every scheme delivered each rank the reference's rows (one forward per image, no communication).
        assert figures["outputs_match"], (name, figures["max_abs_diff"])
        # The bytes at the all-to-all are exactly the rows the routing sends to other ranks.
        assert figures["a2a_bytes_measured"] == figures["a2a_bytes_planned"] > 0, name
        assert figures["a2a_bytes_measured"] < figures["allgather_world_bytes_measured"], name
        assert figures["a2a_over_allgather_sp"] < 1, name
        # Dedup: the group-shared screenshots were encoded once; without the repeats, once per occurrence.
        dedup = figures["dedup"]
        assert dedup["images_encoded"] == dedup["distinct_images"] < dedup["occurrences"], name
        assert dedup["images_encoded_no_dedup"] == dedup["occurrences"], name
        assert dedup["rows_encoded"] < dedup["rows_encoded_no_dedup"], name
        # Each rank read from the store the pixels of its own images: about 1/world of them all.
        assert figures["fetch_ratio"] <= 1.6 / WORLD, name
    # Per replica (2x2x1: two groups of two ranks) the all-gather moves less than over the world.
    sp = result["wall"]["2x2x1"]
    assert sp["allgather_sp_bytes_measured"] < sp["allgather_world_bytes_measured"]
    # The report plots each scheme's worst step over the lower bound, per images per rank.
    from vlrl.bench.curves import curves_of

    (curve,) = curves_of("encode", result)
    assert {x for points in curve.series.values() for x, _ in points} == {2, 8}
