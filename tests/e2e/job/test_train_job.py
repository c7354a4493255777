"""The training job end to end at CI size (examples/train_click.py): warm start, RL steps with
weight sync, held-out evaluation, the run folder, the JSON summary; resume; a branch from the warm
start; ``vlrl eval`` of the finished folder (all read from the session's one canonical run,
``finished_run`` in tests/e2e/conftest.py); and, in a run of its own, a crash mid-step resumed.
Several harness codebases in one run, with their pools and batch shares, are
tests/e2e/examples/test_training_recipes.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.e2e.conftest import PLOTS, RECIPE
from vlrl.config import load_recipe
from vlrl.job.metrics_log import read_metrics

SUMMARY_KEYS = {"success_first", "success_warm_start", "success_last", "success_chance", "steps", "wall_s"}


def test_the_small_recipe_trains_every_group_and_prints_its_summary(finished_run):
    summary, printed = finished_run.first.summary, finished_run.first.printed
    assert SUMMARY_KEYS <= set(printed) and printed["steps"] == summary["steps"] == 2
    assert summary["store_keys_left"] == 0
    assert summary["groups"]["trained"] == 4 and summary["groups"]["pending"] == 0
    groups = summary["groups"]  # counted books: every outcome has its reason, every group an outcome
    assert groups["drift"] == []
    assert sum(groups["reasons"].values()) == groups["rejected"] + groups["dropped"] + groups["failed"] + groups["stale"]


def test_the_run_folder_holds_plots_episodes_tensorboard_and_the_last_checkpoint(finished_run):
    run = finished_run
    assert set(run.plot_bytes) == set(PLOTS) and all(size > 0 for size in run.plot_bytes.values())
    assert sorted(name.split("-")[0] for name in run.episode_sheets) == ["base", "final", "warm"]
    assert run.tensorboard_files
    assert run.state["step"] == 2 and run.state["version"] == 3 and run.state["generated"] >= 4
    assert "step-000001" not in run.checkpoints  # only the last RL checkpoint is kept


def test_the_metrics_hold_the_warm_start_the_rl_steps_and_every_evaluation(finished_run):
    records = finished_run.first.records
    phases = [r["phase"] for r in records]
    assert phases.count("warm-start") == 3  # the demonstrations record and 2 optimizer steps
    rl = [r for r in records if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2] and [r["policy_version"] for r in rl] == [2, 3]
    assert all(r["batch/desktop-click/groups"] == 2 and r["train/tokens_per_s"] > 0 for r in rl)
    assert all(r["train/tis_weight"] > 0 and r["train/ref_kl"] >= 0 for r in rl)
    tags = [r["tag"] for r in records if r["phase"] == "eval"]
    assert tags == ["baselines", "base", "warm", "step1", "final"]
    assert [r["policy_version"] for r in records if r["phase"] == "eval" and r["tag"] != "baselines"] == [0, 1, 2, 3]


def test_a_resume_continues_the_steps_without_a_second_warm_start(finished_run):
    resumed, records = finished_run.resumed.summary, finished_run.resumed.records
    assert resumed["steps"] == 3 and resumed["success_first"] == finished_run.first.summary["success_first"]
    assert [r["phase"] for r in records].count("warm-start") == 3  # no second warm start
    assert [r["step"] for r in records if r["phase"] == "rl"] == [1, 2, 3]
    assert [r["policy_version"] for r in records if r["phase"] == "rl"][-1] == 4
    assert resumed["store_keys_left"] == 0


def test_a_finished_run_resumed_is_evaluated_again_not_retrained(finished_run):
    again = finished_run.again
    finals = [r for r in again.records if r.get("tag") == "final"]
    assert again.summary["steps"] == 3 and [r["policy_version"] for r in finals] == [3, 4, 4]  # the trained weights, not the base's


def test_a_branch_from_the_warm_start_skips_demonstrations_and_starts_from_its_weights(finished_run):
    """Other settings on the same warm start: no demonstrations, no warm start. The branch trains
    LoRA adapters on the full-weight warm start: its first push carries the whole base, so the
    engines (built from the tiny model) score as its trainer does."""
    run = finished_run
    records, branched = run.branched.records, run.branched.summary
    assert "warm-start" not in [r["phase"] for r in records]
    assert [r["tag"] for r in records if r["phase"] == "eval"] == ["baselines", "warm", "final"]
    # Its baselines are its own, measured on its seeds; the warm-start run's never stand in for them (issue 52).
    (bars,) = [r for r in records if r.get("tag") == "baselines"]
    assert "chance" in run.warm_start_state["success"]
    assert [branched[f"success_{kind}"] for kind in ("chance", "constant", "oracle")] == [bars[f"eval/{kind}"] for kind in ("chance", "constant", "oracle")]
    assert [r["policy_version"] for r in records if r["phase"] == "rl"] == [2]  # the warm start's weights, pushed
    warm = [{k: v for k, v in r.items() if k.startswith("eval/")} for r in records + run.again.records if r.get("tag") == "warm"]
    assert warm[0] == warm[1]  # greedy on the same seeds and weights
    assert [r["policy_version"] for r in records if r.get("tag") == "warm"] == [1]  # the warm start's, on the engines
    assert (run.branch_dir / "checkpoints" / "step-000001" / "adapter").is_dir() and branched["store_keys_left"] == 0
    (step,) = [r for r in records if r["phase"] == "rl"]
    assert step["train/logprob_mismatch_max"] < 1e-4  # a resumed LoRA :small run measured 0.79 while pushes left the engines' frozen weights
    assert run.warm_start_state_after_branch == run.warm_start_state  # the checkpoint it started from, untouched


def test_a_crash_mid_step_with_rollouts_ahead_resumes_training_each_group_once(ray_session, tmp_path, monkeypatch):
    import vlrl.job.rl_step as rl_step

    run_dir = tmp_path / "async"

    def config(steps: int):
        config = load_recipe(f"{RECIPE}:small", [f"run_dir={run_dir}"])
        config.warm_start, config.steps, config.checkpoint_every = None, steps, 2
        config.eval = replace(config.eval, episodes=2, every=0, chance=False)
        config.plots = config.tensorboard = False
        config.driver = replace(config.driver, prefetch_batches=1, max_staleness=2)
        config.advantage.sampler.include_max = True  # every group is accepted: each open one must train
        return config

    real = rl_step.train_on

    async def crashing(batch, driver, *args, **kwargs):
        if batch.step == 4:  # step 3 trained and logged after the step-2 checkpoint; groups in flight
            raise RuntimeError("crash in the middle of an asynchronous step")
        done = await real(batch, driver, *args, **kwargs)
        if batch.step == 2:  # step 3's groups are buffered before the step-2 checkpoint, however slow the rollouts
            await driver.fill(args[-1])
        return done

    monkeypatch.setattr(rl_step, "train_on", crashing)
    with pytest.raises(RuntimeError, match="crash in the middle"):
        config(4).build().run()
    checkpoint = json.loads((run_dir / "checkpoints" / "step-000002" / "state.json").read_text())
    crashed = [r for r in read_metrics(run_dir) if r["phase"] == "rl"]
    assert [r["step"] for r in crashed] == [1, 2, 3]
    open_ids = {f"{source}/{seed}" for source, seeds in checkpoint["open_seeds"].items() for seed in seeds}
    assert set(crashed[2]["batch/group_ids"]) <= open_ids  # prefetched before the checkpoint, trained after it

    monkeypatch.setattr(rl_step, "train_on", real)
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
