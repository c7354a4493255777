"""The training job end to end at CI size (examples/train_click.py): warm start, RL steps with
weight sync, held-out evaluation, the run folder, the JSON summary; resume; and two harness
codebases in one run with their batch shares."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from vlrl.cli import main
from vlrl.config import load_recipe
from vlrl.job.metrics_log import read_metrics
from vlrl.job.run_folder import read_checkpoint_state

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"
SUMMARY_KEYS = {"success_first", "success_warm_start", "success_last", "success_chance", "steps", "wall_s"}


def _run(spec: str, run_dir: Path, *overrides: str) -> dict:
    return load_recipe(f"{RECIPE}:{spec}", [f"run_dir={run_dir}", *overrides]).build().run()


CORRECTIONS = ("trainer.trainer.loss.kl_coef=0.05", "trainer.trainer.loss.tis_cap=2.0")
"""TIS and a KL penalty to the warm-start weights, set as a user would."""


def test_the_small_recipe_trains_end_to_end_then_resumes(ray_session, tmp_path, capsys):
    run_dir = tmp_path / "run"
    summary = _run("small", run_dir, *CORRECTIONS)
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert SUMMARY_KEYS <= set(printed) and printed["steps"] == summary["steps"] == 2
    assert summary["store_keys_left"] == 0
    assert summary["groups"]["trained"] == 4 and summary["groups"]["pending"] == 0
    groups = summary["groups"]  # every group that left untrained is there with its reason
    assert sum(groups["reasons"].values()) >= groups["rejected"] + groups["dropped"] + groups["failed"]
    for name in ("reward", "pass_rate", "episode_length", "entropy", "throughput", "overview", "episodes"):
        assert (run_dir / "plots" / f"{name}.png").stat().st_size > 0
    records = read_metrics(run_dir)
    phases = [r["phase"] for r in records]
    assert phases.count("warm-start") == 3  # the demonstrations record and 2 optimizer steps
    rl = [r for r in records if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2] and [r["policy_version"] for r in rl] == [2, 3]
    assert all(r["batch/desktop-click/groups"] == 2 and r["train/tokens_per_s"] > 0 for r in rl)
    assert all(r["train/tis_weight"] > 0 and r["train/ref_kl"] >= 0 for r in rl)
    tags = [r["tag"] for r in records if r["phase"] == "eval"]
    assert tags == ["chance", "base", "warm", "step1", "final"]
    assert [r["policy_version"] for r in records if r["phase"] == "eval" and r["tag"] != "chance"] == [0, 1, 2, 3]
    assert sorted(p.name.split("-")[0] for p in (run_dir / "episodes").glob("*.png")) == ["base", "final", "warm"]
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    state = json.loads((run_dir / "checkpoints" / "step-000002" / "state.json").read_text())
    assert state["step"] == 2 and state["version"] == 3 and state["generated"] >= 4
    assert not (run_dir / "checkpoints" / "step-000001").exists()  # only the last RL checkpoint is kept

    resumed = _run("small", run_dir, "steps=3", "resume=true", *CORRECTIONS)
    assert resumed["steps"] == 3 and resumed["success_first"] == summary["success_first"]
    records = read_metrics(run_dir)
    assert [r["phase"] for r in records].count("warm-start") == 3  # no second warm start
    assert [r["step"] for r in records if r["phase"] == "rl"] == [1, 2, 3]
    assert [r["policy_version"] for r in records if r["phase"] == "rl"][-1] == 4
    assert resumed["store_keys_left"] == 0
    again = _run("small", run_dir, "steps=3", "resume=true", *CORRECTIONS)  # finished: evaluated again, not retrained
    finals = [r for r in read_metrics(run_dir) if r.get("tag") == "final"]
    assert again["steps"] == 3 and [r["policy_version"] for r in finals] == [3, 4, 4]  # the trained weights, not the base's

    warm_start = run_dir / "checkpoints" / "warm-start"
    before, source = read_checkpoint_state(warm_start), read_metrics(run_dir)
    branch_dir = tmp_path / "branch"  # another setting on the same warm start: no demonstrations, no warm start
    branched = _run("small", branch_dir, "steps=1", f"start_from={warm_start}", "driver.hook.step_credit=StepCredit")
    records = read_metrics(branch_dir)
    assert "warm-start" not in [r["phase"] for r in records]
    assert [r["tag"] for r in records if r["phase"] == "eval"] == ["warm", "final"]
    assert [r["policy_version"] for r in records if r["phase"] == "rl"] == [2]  # the warm start's weights, pushed
    warm = [{k: v for k, v in r.items() if k.startswith("eval/")} for r in records + source if r.get("tag") == "warm"]
    assert warm[0] == warm[1]  # greedy on the same seeds and weights
    assert [r["policy_version"] for r in records if r.get("tag") == "warm"] == [1]  # the warm start's, on the engines
    assert (branch_dir / "checkpoints" / "step-000001").is_dir() and branched["store_keys_left"] == 0
    assert read_checkpoint_state(warm_start) == before  # the checkpoint it started from, untouched

    capsys.readouterr()  # vlrl eval of the finished run: its sources, its newest checkpoint
    assert main(["eval", str(run_dir), "--episodes", "2", "--no-chance", "--screenshots", "0"]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert evaluated["processor"] == str(run_dir / "checkpoints" / "step-000003" / "hf")
    assert list(evaluated["sources"]) == ["desktop-click"] and evaluated["episodes_played"] == 2
    assert (run_dir / "eval" / "report.md").exists()


def test_two_harness_codebases_in_one_run_keep_their_pools_and_batch_shares(ray_session, tmp_path):
    run_dir = tmp_path / "mixed"
    summary = _run("mixed_small", run_dir)
    assert summary["steps"] == 2 and summary["store_keys_left"] == 0
    assert set(summary["sources"]) == {"desktop-click", "web-forms"}
    rl = [r for r in read_metrics(run_dir) if r["phase"] == "rl"]
    for record in rl:  # 4 groups per batch at shares 3:1
        assert record["batch/desktop-click/groups"] == 3 and record["batch/web-forms/groups"] == 1
    assert sum(r["rollout/web-forms/episodes"] for r in rl) >= 2
    assert sum(r["rollout/desktop-click/episodes"] for r in rl) >= 6


def test_a_crash_mid_step_with_rollouts_ahead_resumes_training_each_group_once(ray_session, tmp_path, monkeypatch):
    import vlrl.job.train_job as train_job

    run_dir = tmp_path / "async"

    def config(steps: int):
        config = load_recipe(f"{RECIPE}:small", [f"run_dir={run_dir}"])
        config.warm_start, config.steps, config.checkpoint_every = None, steps, 2
        config.eval = replace(config.eval, episodes=2, every=0, chance=False)
        config.plots = config.tensorboard = False
        config.driver = replace(config.driver, prefetch_batches=1, max_staleness=2)
        config.driver.hook.sampler.include_max = True  # every group is accepted: each open one must train
        return config

    real = train_job.train_on

    async def crashing(batch, *args):
        if batch.step == 4:  # step 3 trained and logged after the step-2 checkpoint; groups in flight
            raise RuntimeError("crash in the middle of an asynchronous step")
        return await real(batch, *args)

    monkeypatch.setattr(train_job, "train_on", crashing)
    with pytest.raises(RuntimeError, match="crash in the middle"):
        config(4).build().run()
    checkpoint = json.loads((run_dir / "checkpoints" / "step-000002" / "state.json").read_text())
    crashed = [r for r in read_metrics(run_dir) if r["phase"] == "rl"]
    assert [r["step"] for r in crashed] == [1, 2, 3]
    open_ids = {f"{source}/{seed}" for source, seeds in checkpoint["open_seeds"].items() for seed in seeds}
    assert set(crashed[2]["batch/group_ids"]) <= open_ids  # prefetched before the checkpoint, trained after it

    monkeypatch.setattr(train_job, "train_on", real)
    resumed = config(5)
    resumed.resume = True
    summary = resumed.build().run()
    rl = [r for r in read_metrics(run_dir) if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2, 3, 4, 5]  # step 3 of the crashed try moved out, trained again
    assert [json.loads(line)["step"] for line in (run_dir / "metrics.reverted.jsonl").read_text().splitlines()] == [3]
    trained = [group for r in rl for group in r["batch/group_ids"]]
    assert len(trained) == len(set(trained)) == 10  # no group trained twice in the run's history
    final = json.loads((run_dir / "checkpoints" / "step-000005" / "state.json").read_text())
    still_open = {f"{source}/{seed}" for source, seeds in final["open_seeds"].items() for seed in seeds}
    after = {group for r in rl[2:] for group in r["batch/group_ids"]}
    assert open_ids <= after | still_open  # every group the checkpoint had not trained: trained after the resume, or still open
    assert summary["store_keys_left"] == 0
