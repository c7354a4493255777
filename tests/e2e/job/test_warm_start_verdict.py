"""A warm start that leaves held-out success at chance stops the job before RL, with the figures
(issue 36): ``examples/train_click.py:small`` with a learning rate too small to learn anything in
its 2 steps, one held-out evaluation during the warm start, and the baselines measured on the
evaluation's own seeds."""

from __future__ import annotations

import json

from tests.e2e.conftest import RECIPE
from vlrl.cli import STOPPED, main
from vlrl.job.evaluate import EVAL_SEED_BASE
from vlrl.job.metrics_log import read_metrics
from vlrl.job.run_folder import SUMMARY_FILE

AT_CHANCE = (
    "warm_start.continue_below_baseline=false", "warm_start.lr=1e-9", "warm_start.eval_every=1", "plots=false", "tensorboard=false"
)


def test_a_warm_start_left_at_chance_stops_the_job_before_rl(ray_session, tmp_path, capsys):
    run = tmp_path / "run"
    overrides = [a for o in (f"run_dir={run}", *AT_CHANCE) for a in ("--set", o)]
    assert main(["train", f"{RECIPE}:small", *overrides]) == STOPPED
    err = capsys.readouterr().err
    summary = json.loads((run / SUMMARY_FILE).read_text())
    warm, best = summary["success_warm_start"], max(summary["success_chance"], summary["success_constant"])
    assert warm <= best
    said = (
        f"vlrl train: warm start: held-out success {warm:.3f} is at or below the best baseline {best:.3f} on the same 4"
        f" seeds per source (random clicks {summary['success_chance']:.3f}, the best constant point"
        f" {summary['success_constant']:.3f}, the oracle {summary['success_oracle']:.3f})"
    )
    assert said in err and "Stopped before RL; warm_start.continue_below_baseline=true runs RL anyway" in err
    assert summary["stopped"].startswith(said.removeprefix("vlrl train: ")) and summary["steps"] == 0
    assert summary["stopped"].startswith(summary["warm_start_below_baseline"])

    records = read_metrics(run)
    assert not [r for r in records if r.get("phase") == "rl"]  # no RL step ran
    assert not [r for r in records if r.get("tag") == "final"]
    during = [r for r in records if r.get("phase") == "warm-start" and r.get("tag") == "warm-step1"]
    assert len(during) == 1 and during[0]["step"] == 1 and 0 <= during[0]["eval/success"] <= 1

    # the baselines: measured on the held-out evaluation's own seeds, per source and per family
    assert summary["baseline_seeds"] == [EVAL_SEED_BASE, EVAL_SEED_BASE + 3]
    source = summary["sources"]["desktop-click"]
    assert source["constant"] is not None and len(source["constant_point"]) == 2 and source["oracle"] == 1.0
    family = source["tasks"]["click-target"]
    assert {"success_first", "success_last", "chance", "constant", "oracle"} <= family.keys()
    assert family["constant"] == source["constant"]  # one family: its best point is the source's
