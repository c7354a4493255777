"""A tiny build trains at its family's rate scale (``tiny.rate_scale``): the rates the run plan
gives the optimizer, for the RL stage and the warm start (``vlrl.job.run_plan``)."""

from pathlib import Path

import pytest

from vlrl.config.recipe import load_recipe
from vlrl.models.tiny import TinyModel

TRAIN_CLICK = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"


def _planned_rates(overrides: list[str], tmp_path: Path) -> tuple[float, float]:
    """The RL stage's and the warm start's rate as the plan hands them to every rank's AdamW."""
    plan = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}", *overrides]).plan()
    return plan.rl.rank.optim.lr, plan.warm_start.rank.optim.lr


@pytest.mark.parametrize(
    "overrides, rates",
    [
        ([], (1e-3, 1e-2)),  # the tiny Qwen2-VL: the recipe's rates
        (["tiny.family=qwen3_5"], (5e-4, 5e-3)),  # the hybrid build: half of them
        (["tiny.family=qwen3_5", "tiny.rate_scale=1"], (1e-3, 1e-2)),  # as the user says
        (["tiny.rate_scale=0.1"], (1e-4, 1e-3)),
    ],
)
def test_the_trainer_gets_the_recipes_rates_times_the_tiny_builds_scale(overrides, rates, tmp_path):
    assert _planned_rates(overrides, tmp_path) == pytest.approx(rates)


def test_a_checkpoint_trains_at_the_rates_as_given(tmp_path, tiny_path):
    """The scale is the tiny build's: a named checkpoint is not scaled, whatever ``tiny`` says."""
    config = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}", "tiny.rate_scale=0.1"])
    config.model_path = str(tiny_path)
    assert config.plan().rl.rank.optim.lr == pytest.approx(1e-3)


def test_the_tiny_widths_follow_the_family_unless_named():
    assert TinyModel().width() == 64 and TinyModel(family="qwen3_5").width() == 128
    assert TinyModel(family="qwen3_5", hidden_size=64).width() == 64
