"""The baselines' arithmetic (``vlrl.job.baselines.summarise``): the best constant point, per source
and per task family, on the seeds the outcomes came from. Measured on a real pool in
tests/e2e/job/test_eval.py (the canonical run's evaluation)."""

from __future__ import annotations

import pytest

from vlrl.config import ConfigError, load_recipe
from vlrl.job.baselines import Outcomes, SweepResult, grid_points, overall, summarise

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
