"""examples/train_custom_harness.py: a harness written in a recipe file passes the harness contract and
its oracle solves it. It trains as one source of
the five-codebase run in tests/e2e/examples/test_training_recipes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlrl.config import load_recipe
from vlrl.harness import Action, check_harness, resolve

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_custom_harness.py"


@pytest.fixture(scope="module")
def tiles():
    load_recipe(f"{RECIPE}:small")  # registers the harness
    return resolve("color-tiles")


def test_the_example_harness_keeps_the_contract_and_its_oracle_solves_it(tiles):
    check_harness(lambda: tiles())
    harness = tiles()
    solved = []
    for seed in range(20):
        obs, _ = harness.reset(seed=seed)
        assert obs.goal.startswith("Click the ") and obs.screenshot.shape == (120, 160, 3)
        solved.append(harness.step(harness.oracle())[4]["success"])
    assert all(solved)
    harness.reset(seed=0)
    x, y = harness.oracle().x, harness.oracle().y  # the centre of a 28-pixel tile: 15 pixels off is outside
    _, reward, terminated, _, info = harness.step(Action.click(x - 15, y) if x >= 15 else Action.click(x + 15, y))
    assert terminated and reward == 0.0 and not info["success"]
