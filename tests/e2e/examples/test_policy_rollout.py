"""examples/policy_rollout.py runs as documented (at a small size) and leaves no payload behind."""

from __future__ import annotations

from pathlib import Path


from vlrl.config import load_recipe

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "policy_rollout.py"


def test_policy_rollout_of_the_tiny_model(ray_session):
    summary = load_recipe(str(RECIPE), ["groups_per_source=1", "sources[0].group_size=4"]).build().run()
    figures = summary["sources"]["desktop-click"]
    assert figures["trajectories"] == 4 and figures["failed"] == 0, summary["errors"]
    assert summary["book"]["ok"] == 4 and summary["sequences"] == 4
    # Each trajectory shipped its screenshots as the tiles the engine lacked: its first screen
    # compressed, then the changed tiles; the four together less than one raw 320x240 screen.
    screen = 320 * 240 * 3
    assert 0 < summary["image_bytes_received"] < screen
    assert summary["store_keys_left"] == 0


def test_mixed_sources_run_on_their_own_env_pools(ray_session):
    overrides = ["groups_per_source=1", "sources[0].group_size=2", "sources[1].group_size=2"]
    summary = load_recipe(f"{RECIPE}:mixed", overrides).build().run()
    assert summary["pool_sizes"] == {"loop": 1, "desktop": 2, "browser": 1}
    assert {name: f["trajectories"] for name, f in summary["sources"].items()} == {"desktop-click": 2, "web-forms": 2}
    assert summary["book"]["ok"] == 4 and summary["store_keys_left"] == 0
