"""The training recipes beyond click-target run end to end at CI size (a warm start and one RL step:
further steps, resumes, evaluations and baselines are the canonical run's), in two jobs:

- ``examples/train_desktop_form.py:small`` (a multi-turn desktop form with typing, step credit) on
  a Qwen3-VL checkpoint folder that transformers' own classes wrote (``model_path``): the family
  beside the canonical run's Qwen2-VL (tests/e2e/conftest.py) and a folder vlrl's tiny builder did
  not write.
- Five harness codebases in one run, each source taken from its recipe's ``:small``: click-target
  on the desktop (``train_click.py:mixed_small``), the browser web app (``train_web_app.py``),
  MiniWoB++ (``train_miniwob.py``), a real X desktop (``train_xdesktop.py``) and a harness written
  in a recipe file (``train_custom_harness.py``: its env hosts are Ray actors that get the class by
  value; its contract and oracle are tests/unit/examples/test_custom_harness.py), each in its own
  env pool and with its batch share (2:1:1:1:1).

Each run must have trained on rollouts of every source (and on kept demonstrations of each) and
left nothing in the store. A job costs tens of CPU seconds before its first episode (trainer,
engine, loop host, store), so sources that take the same path share one."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.hf_checkpoints import build_hf_checkpoint
from vlrl.config import load_recipe
from vlrl.job.evaluate import Evaluation
from vlrl.job.metrics_log import read_metrics
from vlrl.pool import HostBudget
from vlrl.pool.host_config import HostConfig

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PLOTS = ("reward", "pass_rate", "overview", "episodes")
LEAN = ("steps=1", "eval.episodes=1", "eval.chance=false", "tensorboard=false")
"""What the canonical run already covers: RL steps after the first, the baselines, TensorBoard,
evaluations beyond one episode."""
SHARES = {"desktop-click": 2, "web-form": 1, "miniwob": 1, "xdesktop": 1, "color-tiles": 1}
"""Batch shares of the five-codebase run, by source."""
RECIPES = ("train_web_app.py", "train_miniwob.py", "train_xdesktop.py", "train_custom_harness.py")
"""The recipes whose ``:small`` source joins ``train_click.py:mixed_small``'s desktop source."""


def _rollouts(records: list[dict], source: str) -> tuple[float, float]:
    """Training episodes of ``source`` over the RL steps (every batch held its groups), and the
    most turns per episode of ``source`` in a step."""
    rl = [r for r in records if r["phase"] == "rl"]
    assert all(r[f"batch/{source}/groups"] >= 1 for r in rl)
    return sum(r[f"rollout/{source}/episodes"] for r in rl), max(r.get(f"rollout/{source}/turns", 0) for r in rl)


def _demonstrations(records: list[dict]) -> dict:
    (record,) = [r for r in records if r["phase"] == "warm-start" and "demos/sequences" in r]
    return record


def test_desktop_form_trains_a_transformers_built_qwen3_vl_on_multi_turn_typing_with_step_credit(ray_session, tmp_path):
    """That ``tiny.family`` builds the family the job trains, for every family, is
    tests/unit/models/test_tiny.py; Qwen2.5-VL's transformers-built folder is served in
    tests/integration/rollout/server/test_serve_families.py and stepped in
    tests/integration/train/test_families_end_to_end.py."""
    path = build_hf_checkpoint("qwen3_vl", tmp_path / "checkpoint")
    run_dir = tmp_path / "form"
    overrides = [f"run_dir={run_dir}", f"model_path={path}", "advantage.step_credit=StepCredit", "plots=false", *LEAN]
    summary = load_recipe(f"{EXAMPLES / 'train_desktop_form.py'}:small", overrides).build().run()
    assert summary["model"] == str(path) and summary["model_family"] == "qwen3_vl"
    assert summary["steps"] == 1 and summary["store_keys_left"] == 0
    records = read_metrics(run_dir)
    demos = _demonstrations(records)
    assert demos["demos/sequences"] == demos["demos/episodes"] == 8, demos["demos/dropped"]
    assert [r["step"] for r in records if r["phase"] == "warm-start" and "train/loss" in r] == [1, 2]
    episodes, turns = _rollouts(records, "desktop-form")
    assert episodes >= 8 and turns > 1  # 1 step of 2 groups of 4
    # a group's episodes start on one screen: at least their first turns share a state
    grouped = [r["batch/step_grouped_turns"] for r in records if r["phase"] == "rl"]
    assert len(grouped) == 1 and all(0 < g <= 1 for g in grouped)


def _five_codebases(run_dir: Path):
    """``train_click.py:mixed_small`` (desktop click-target beside a browser source) with the
    browser source of ``train_web_app.py:small`` in place of its own and the sources of
    ``train_miniwob.py:small``, ``train_xdesktop.py:small`` and ``train_custom_harness.py:small``
    (loading it registers its harness): one env pool per codebase, groups of 2."""
    config = load_recipe(f"{EXAMPLES / 'train_click.py'}:mixed_small", [f"run_dir={run_dir}", "steps=1", "tensorboard=false"])
    click = config.sources[0]
    others = [load_recipe(f"{EXAMPLES / recipe}:small").sources[0] for recipe in RECIPES]
    config.sources = [click, *others]
    for source in config.sources:
        source.group_size, source.batch_share = 2, SHARES[source.name]
    config.driver.groups_per_batch = sum(SHARES.values())
    config.pool.budget = HostBudget(total_hosts=len(SHARES) + 1, shares={"loop": 1, **{s.codebase: 1 for s in config.sources}})
    config.pool.env_host = HostConfig(max_tenants=4)  # Chromium processes, X servers per env host
    config.micro_batches.max_tokens_per_micro_batch = 4096  # 640x480 pages, up to 12 turns
    config.eval = Evaluation(episodes=1, every=0, screenshots=1, chance=False)
    return config


def test_five_codebases_in_one_run_train_on_their_demonstrations_pools_and_batch_shares(ray_session, tmp_path):
    run_dir = tmp_path / "mixed"
    summary = _five_codebases(run_dir).build().run()
    assert summary["steps"] == 1 and summary["store_keys_left"] == 0
    assert set(summary["sources"]) == set(SHARES)
    for name in PLOTS:
        assert (run_dir / "plots" / f"{name}.png").stat().st_size > 0
    records = read_metrics(run_dir)
    demos = _demonstrations(records)  # every source's demonstrations kept: 2 episodes each
    assert demos["demos/sequences"] == demos["demos/episodes"] == 2 * len(SHARES), demos["demos/dropped"]
    rl = [r for r in records if r["phase"] == "rl"]
    for record in rl:  # 6 groups per batch at shares 2:1:1:1:1
        assert {name: record[f"batch/{name}/groups"] for name in SHARES} == SHARES
    episodes = {name: _rollouts(records, name) for name in SHARES}
    assert episodes["desktop-click"][0] >= 4 and episodes["desktop-click"][1] == 1  # 1 step of 2 groups of 2
    assert episodes["web-form"][0] >= 2 and episodes["web-form"][1] > 1  # 1 step of 1 group of 2
    assert episodes["miniwob"][0] >= 2 and episodes["miniwob"][1] == 1  # one click each
    assert episodes["xdesktop"][0] >= 2 and episodes["xdesktop"][1] >= 1
    assert episodes["color-tiles"][0] >= 2 and episodes["color-tiles"][1] == 1  # the recipe file's harness, on its env hosts
