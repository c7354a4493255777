"""examples/train_opd.py at CI size: a teacher engine scores every rollout and the RL stage
trains on teacher-minus-student advantages, end to end."""

from __future__ import annotations

from pathlib import Path


from vlrl.config import load_recipe
from vlrl.job.metrics_log import read_metrics

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_opd.py"


def test_every_trained_group_was_scored_by_the_teacher(ray_session, tiny_path, tmp_path):
    run_dir = tmp_path / "opd"
    # RL steps after the first, evaluations beyond one episode, plots and TensorBoard are the canonical run's to test
    lean = ("steps=1", "eval.episodes=1", "plots=false", "tensorboard=false")
    config = load_recipe(f"{RECIPE}:small", [f"run_dir={run_dir}", f"teacher.model_path={tiny_path}", *lean])
    summary = config.build().run()
    assert summary["steps"] == 1 and summary["store_keys_left"] == 0
    groups = summary["groups"]
    assert groups["trained"] == 2
    assert groups["graded"] >= groups["accepted"] >= groups["trained"]  # no group trained unscored
    rl = [r for r in read_metrics(run_dir) if r["phase"] == "rl"]
    assert [r["policy_version"] for r in rl] == [2]
    assert all(r["train/tokens_per_s"] > 0 for r in rl)
