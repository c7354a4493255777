"""A tiny build trains at its family's rate scale (``tiny.rate_scale``): the rates the job hands
the trainer, for the RL stage and the warm start, with a stand-in for the trainer group."""

from dataclasses import replace
from pathlib import Path

import pytest

from vlrl.config.recipe import load_recipe
from vlrl.job.session import JobSession
from vlrl.models.tiny import TinyModel

TRAIN_CLICK = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"


class RecordingTrainer:
    """Stands in for ``TrainerGroup.Config``: records what the job builds a group with."""

    def __init__(self) -> None:
        self.optim = None

    def build(self, **kwargs):
        self.optim = kwargs["optim"]


def _handed_rates(overrides: list[str], tmp_path: Path) -> tuple[float, float]:
    """The RL stage's and the warm start's rate as ``JobSession.trainer_group`` hands them over."""
    config = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}", *overrides])
    config.trainer = recorder = RecordingTrainer()
    session = JobSession(config)
    session.trainer_group("policy")
    rl = recorder.optim.lr
    session.trainer_group("policy", optim=replace(config.optim, lr=config.warm_start.lr))
    return rl, recorder.optim.lr


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
    assert _handed_rates(overrides, tmp_path) == pytest.approx(rates)


def test_a_checkpoint_trains_at_the_rates_as_given(tmp_path):
    """The scale is the tiny build's: a named checkpoint is not scaled, whatever ``tiny`` says."""
    config = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}", "tiny.family=qwen3_5"])
    config.model_path = str(tmp_path / "checkpoint")
    config.trainer = recorder = RecordingTrainer()
    JobSession(config).trainer_group("policy")
    assert recorder.optim.lr == pytest.approx(1e-3)


def test_the_tiny_widths_follow_the_family_unless_named():
    assert TinyModel().width() == 64 and TinyModel(family="qwen3_5").width() == 128
    assert TinyModel(family="qwen3_5", hidden_size=64).width() == 64
