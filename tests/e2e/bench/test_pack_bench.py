"""``vlrl bench pack`` at smoke size, in this process: the issue's targets and the report's curves. The
benchmark's parts are tests/unit/bench/test_pack_bench.py."""

from __future__ import annotations


def test_vlrl_bench_pack_meets_the_issue_targets():
    from tests.helpers.run_bench import run_bench

    result = run_bench("pack", size="smoke")
    assert result["imbalance_planner"] <= result["imbalance_kk"] + 1e-9
    assert result["imbalance_planner"] <= result["imbalance_external_kk"] + 1e-9
    assert result["cp_fetch_ratio_cp2"] <= 1.1 / 2 and result["cp_fetch_ratio_cp4"] <= 1.1 / 4
    assert result["tp_copy_pss_tp"] == 4 and result["tp_copy_pss_ratio"] < 0.75 / 2
    # The report plots each DP's regimes: a line per method over sequences per rank.
    from vlrl.bench.curves import curves_of

    curves = {curve.name: curve for curve in curves_of("pack", result)}
    assert set(curves) == {"regimes_dp8", "regimes_dp32", "regimes_dp64"}
    lines = curves["regimes_dp8"].series
    assert set(lines) == {"planner", "kk", "external_kk", "lower_bound", "lockstep_imbalance"}
    assert [x for x, _ in lines["external_kk"]] == [2, 4, 16, 64]
