"""The training recipes beyond click-target run end to end at CI size (``:small``): a multi-turn
desktop form with typing, a browser web app, MiniWoB++ tasks. Each run must have trained on
rollouts of its own codebase (and on kept demonstrations where it warm-starts) and left nothing
in the store."""

from __future__ import annotations

from pathlib import Path

from vlrl.config import load_recipe
from vlrl.job.metrics_log import read_metrics

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PLOTS = ("reward", "pass_rate", "overview", "episodes")


def _run_small(recipe: str, run_dir: Path, *overrides: str) -> tuple[dict, list[dict]]:
    summary = load_recipe(f"{EXAMPLES / recipe}:small", [f"run_dir={run_dir}", *overrides]).build().run()
    assert summary["steps"] == 2 and summary["store_keys_left"] == 0
    for name in PLOTS:
        assert (run_dir / "plots" / f"{name}.png").stat().st_size > 0
    return summary, read_metrics(run_dir)


def _rollouts(records: list[dict], source: str) -> tuple[float, float]:
    """Training episodes of ``source`` over the RL steps (every batch held its groups), and the
    most turns per episode in a step."""
    rl = [r for r in records if r["phase"] == "rl"]
    assert all(r[f"batch/{source}/groups"] >= 1 for r in rl)
    return sum(r[f"rollout/{source}/episodes"] for r in rl), max(r.get("rollout/turns", 0) for r in rl)


def _demonstrations(records: list[dict]) -> dict:
    (record,) = [r for r in records if r["phase"] == "warm-start" and "demos/sequences" in r]
    return record


def test_desktop_form_trains_on_multi_turn_typing_demonstrations_with_step_credit(ray_session, tmp_path):
    summary, records = _run_small("train_desktop_form.py", tmp_path / "form", "advantage.step_credit=StepCredit")
    demos = _demonstrations(records)
    assert demos["demos/sequences"] == demos["demos/episodes"] == 8, demos["demos/dropped"]
    assert [r["step"] for r in records if r["phase"] == "warm-start" and "train/loss" in r] == [1, 2]
    episodes, turns = _rollouts(records, "desktop-form")
    assert episodes >= 16 and turns > 1  # 2 steps of 2 groups of 4
    # a group's episodes start on one screen: at least their first turns share a state
    grouped = [r["batch/step_grouped_turns"] for r in records if r["phase"] == "rl"]
    assert len(grouped) == 2 and all(0 < g <= 1 for g in grouped)


def test_web_app_trains_on_browser_rollouts(ray_session, tmp_path):
    summary, records = _run_small("train_web_app.py", tmp_path / "web")
    demos = _demonstrations(records)
    assert demos["demos/sequences"] == demos["demos/episodes"] == 2, demos["demos/dropped"]
    episodes, turns = _rollouts(records, "web-form")
    assert episodes >= 4 and turns > 1  # 2 steps of 1 group of 2


def test_miniwob_trains_on_miniwob_rollouts(ray_session, tmp_path):
    _, records = _run_small("train_miniwob.py", tmp_path / "miniwob")
    demos = _demonstrations(records)
    assert demos["demos/sequences"] == demos["demos/episodes"] == 6, demos["demos/dropped"]
    episodes, turns = _rollouts(records, "miniwob")
    assert episodes >= 16 and turns == 1  # 2 steps of 2 groups of 4, one click each


def test_xdesktop_trains_on_real_desktop_rollouts(ray_session, tmp_path):
    summary, records = _run_small("train_xdesktop.py", tmp_path / "xdesktop")
    demos = _demonstrations(records)
    assert demos["demos/sequences"] == demos["demos/episodes"] == 4, demos["demos/dropped"]
    episodes, turns = _rollouts(records, "xdesktop")
    assert episodes >= 4 and turns >= 1  # 2 steps of 2 groups of 2
    assert summary["store_keys_left"] == 0
