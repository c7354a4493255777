"""examples/scripted_rollout.py runs as documented (at a small size)."""

from __future__ import annotations

from pathlib import Path


from vlrl.config import load_recipe

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "scripted_rollout.py"


def test_the_oracle_solves_both_desktop_sources(ray_session):
    summary = load_recipe(str(RECIPE), ["episodes_per_source=4"]).build().run()
    assert summary["pool_sizes"] == {"loop": 1, "desktop": 2}
    for figures in summary["sources"].values():
        assert figures == {**figures, "episodes": 4, "failed": 0, "success_rate": 1.0}


def test_random_clicks_stay_near_chance(ray_session):
    summary = load_recipe(f"{RECIPE}:random_policy", ["episodes_per_source=8"]).build().run()
    assert summary["sources"]["desktop-form"]["success_rate"] == 0.0
    assert summary["sources"]["desktop-click"]["success_rate"] <= 0.5


def test_two_codebases_run_in_their_own_pools(ray_session):
    summary = load_recipe(f"{RECIPE}:desktop_and_browser", ["episodes_per_source=3"]).build().run()
    assert summary["pool_sizes"] == {"loop": 1, "desktop": 2, "browser": 1}
    assert {name: f["success_rate"] for name, f in summary["sources"].items()} == {"desktop-click": 1.0, "web-forms": 1.0}
