"""examples/train_custom_harness.py: the training job runs end to end on a harness written in a
recipe file (its env hosts are Ray actors that get the class by value). Its contract and oracle are
tests/unit/examples/test_custom_harness.py."""

from __future__ import annotations

from pathlib import Path

from vlrl.config import load_recipe
from vlrl.job.metrics_log import read_metrics

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_custom_harness.py"


def test_the_job_trains_on_the_example_harness(ray_session, tmp_path):
    run_dir = tmp_path / "tiles"
    # evaluations between steps and the baselines are the canonical run's to test
    summary = load_recipe(f"{RECIPE}:small", [f"run_dir={run_dir}", "eval.every=0", "eval.chance=false"]).build().run()
    assert summary["steps"] == 2 and summary["store_keys_left"] == 0
    assert set(summary["sources"]) == {"color-tiles"}
    records = read_metrics(run_dir)
    demos = next(r for r in records if "demos/sequences" in r)
    assert demos["demos/sequences"] > 0  # the oracle's demonstrations ran on the pool's env hosts
    rl = [r for r in records if r["phase"] == "rl"]
    assert all(r["batch/color-tiles/groups"] == 2 for r in rl)
