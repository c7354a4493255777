"""The baselines' arithmetic (``vlrl.job.baselines.summarise``): the best constant point, per source
and per task family, on the seeds the outcomes came from. Measured on a real pool in
tests/e2e/job/test_eval.py (the canonical run's evaluation)."""

from __future__ import annotations

import pytest

from vlrl.config import ConfigError, load_recipe
from vlrl.job.baselines import Outcomes, SweepResult, below_baseline, grid_points, overall, standard_error, summarise

POINTS = grid_points(160, 120, (2, 2))


def test_grid_points_are_cell_centres_row_by_row_and_an_empty_grid_is_refused():
    assert POINTS == ((40, 30), (120, 30), (40, 90), (120, 90))
    with pytest.raises(ConfigError, match=r"'eval.constant_grid': got \(0, 3\) \(tuple\); expected two whole numbers of at least 1"):
        load_recipe("examples/train_click.py:small", ["eval.constant_grid=[0,3]"])


def test_the_best_constant_point_per_source_and_per_family_beside_chance_and_oracle():
    sweeps = {
        10: SweepResult(10, "a", (True, False, False, False), POINTS),
        11: SweepResult(11, "a", (True, False, False, False), POINTS),
        12: SweepResult(12, "b", (False, False, False, True), POINTS),
    }
    outcomes = Outcomes(
        seeds=[10, 11, 12, 13],
        chance={10: ("a", False), 11: ("a", True), 12: ("b", False), 13: ("b", False)},
        oracle={10: ("a", True), 11: ("a", True), 12: ("b", True)},  # 13's oracle run failed
        sweeps=sweeps,  # 13's sweep failed
    )
    found = summarise(outcomes)
    assert found["seeds"] == [10, 13] and found["episodes"] == 4 and found["failed"] == 2
    assert found["constant"] == pytest.approx(2 / 3) and found["constant_point"] == [40, 30]
    assert found["chance"] == 0.25 and found["oracle"] == 1.0 and found["best"] == pytest.approx(2 / 3)
    assert found["tasks"] == {
        "a": {"chance": 0.5, "oracle": 1.0, "constant": 1.0},
        "b": {"chance": 0.0, "oracle": 1.0, "constant": 1.0},  # its own best point, (120, 90)
    }
    both = overall({"s": found, "t": {**found, "episodes": 12, "constant": 0.0, "chance": 0.5}})
    assert both["constant"] == pytest.approx((4 * 2 / 3) / 16) and both["chance"] == pytest.approx((1 + 6) / 16)
    assert both["best"] == both["chance"]


BARS = {"chance": 0.0, "constant": 0.07, "oracle": 1.0, "best": 0.07}


def test_the_warm_start_verdict_wants_more_than_one_standard_error_over_the_best_baseline():
    # 16 of 200 against the best constant's 14 of 200 (issue 52): 0.010 apart, one standard error 0.026.
    assert standard_error(16 / 200, 14 / 200, 200) == pytest.approx(0.02634, abs=1e-5)
    said = below_baseline(16 / 200, BARS, episodes=200)
    assert said.startswith("held-out success 0.080 is above the best baseline 0.070 by 0.010, within one standard error (0.026,"), said
    assert "on the same 200 seeds per source (random clicks 0.000, the best constant point 0.070, the oracle 1.000)" in said
    assert below_baseline(0.07, BARS, episodes=200).startswith("held-out success 0.070 is at or below the best baseline 0.070")
    assert below_baseline(0.14, BARS, episodes=200) == ""  # 28 of 200: 0.070 above, the standard error 0.030
    # Two sources of 200 seeds each: 400 episodes a rate, a smaller standard error, the same gap passes.
    assert below_baseline(0.095, BARS, episodes=200) != "" and below_baseline(0.095, BARS, episodes=200, sources=2) == ""
    # Nothing at all against nothing at all: no evidence either way, so not above.
    assert below_baseline(0.0, {**BARS, "constant": 0.0, "best": 0.0}, episodes=64) != ""
