"""Branching rollouts end to end: the recipe flag ``sources[0].branching=Branching`` turns the
multi-turn select-menu source of ``examples/train_select_menu.py:small`` into trees of episodes
(the desktop harness forks, the root replays), and a CI-size run trains on them with the books
balanced and nothing left in the store."""

from __future__ import annotations

from pathlib import Path

from vlrl.config import load_recipe
from vlrl.job.metrics_log import read_metrics

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_a_branching_select_menu_run_trains_on_trees_with_balanced_books(ray_session, tmp_path):
    run_dir = tmp_path / "branching"
    overrides = [
        f"run_dir={run_dir}", "sources[0].branching=Branching", "plots=false", "tensorboard=false",
        "eval.episodes=1", "eval.chance=false",
    ]  # fmt: skip
    job = load_recipe(f"{EXAMPLES / 'train_select_menu.py'}:small", overrides)
    source = job.sources[0]
    assert source.runs_per_group == 2 and source.group_size == 4  # 2 trees at the env steps of 4 episodes
    summary = job.build().run()
    assert summary["steps"] == 2 and summary["store_keys_left"] == 0
    books = summary["groups"]
    assert books["drift"] == [] and books["failed"] == 0, books
    # every tree's root was replayed to its branch point once and the desktop forked the second branch
    assert books["replays"] >= 1 and books["forks"] >= 1 and books["branch_failures"] == {}, books
    rl = [r for r in read_metrics(run_dir) if r["phase"] == "rl"]
    assert [r["groups/forks"] for r in rl] == sorted(r["groups/forks"] for r in rl)  # counted as they happen
    # the branches trained beside their roots (2 groups of 2 trees a step)
    assert sum(r["batch/branches"] for r in rl) >= 1 and all(r["batch/sequences"] >= 4 for r in rl)
    assert sum(r["batch/sequences"] for r in rl) == sum(r["batch/branches"] for r in rl) + 4 * len(rl)
