"""The run plan gives its trainers a lag-0 mismatch threshold from the engine's dtype
(``vlrl.job.run_plan``; ``train.mismatch.lag0_threshold``), and keeps one the recipe sets."""

from pathlib import Path

import pytest

from vlrl.config.recipe import load_recipe
from vlrl.train.mismatch import LAG0_FLOOR

TRAIN_CLICK = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"


@pytest.mark.parametrize(
    "overrides, lag0",
    [
        ([], LAG0_FLOOR),  # the embedded engine in float32: float noise, the floor
        (["engine.dtype=bfloat16"], 4 * 0.058),  # four times bfloat16's measured largest turn gap
        (["engine.dtype=bfloat16", "loss.mismatch_warn_lag0=0.05"], 0.05),  # as the recipe says
    ],
)
def test_the_lag_0_threshold_comes_from_the_engine_unless_set(overrides, lag0, tmp_path):
    config = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}", *overrides])
    loss = config.plan().rl.rank.loss
    assert loss.mismatch_warn_lag0 == pytest.approx(lag0)
    assert loss.mismatch_warn == config.loss.mismatch_warn  # lagged turns keep their bound
