"""examples/policy_rollout.py runs as documented (at a small size) and leaves no payload behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlrl.config import load_recipe

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "policy_rollout.py"


@pytest.mark.ray
@pytest.mark.slow
def test_policy_rollout_of_the_tiny_model(ray_session):
    summary = load_recipe(str(RECIPE), ["groups_per_source=1", "sources[0].group_size=4"]).build().run()
    figures = summary["sources"]["desktop-click"]
    assert figures["trajectories"] == 4 and figures["failed"] == 0
    assert summary["book"]["ok"] == 4 and summary["sequences"] == 4
    # Each trajectory shipped each of its screenshots once: at least its first screen, at most
    # one per turn (3 turns of 320x240).
    screen = 320 * 240 * 3
    assert summary["image_bytes_received"] % screen == 0
    assert 4 * screen <= summary["image_bytes_received"] <= 4 * 3 * screen
    assert summary["unique_images"] <= summary["image_bytes_received"] // screen
    assert summary["store_keys_left"] == 0
