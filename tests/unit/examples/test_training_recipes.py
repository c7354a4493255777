"""The training recipes beyond click-target load as documented: the select-menu variants differ in
step credit, replay or warm start; the xdesktop suite evaluates each family as its own source; the
variants draw several tasks the harness offers. Their runs are tests/e2e/examples/test_training_recipes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlrl.config import load_recipe
from vlrl.harness.registry import resolve

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("spec", ["recipe", "step_credit", "replay", "long_warm_start", "small"])
def test_the_select_menu_recipes_load_and_differ_in_step_credit_replay_or_warm_start(spec):
    config = load_recipe(f"{EXAMPLES / 'train_select_menu.py'}:{spec}")
    assert config.sources[0].env.tasks == ["select-menu"]
    assert (config.warm_start.episodes, config.warm_start.steps) == {
        "long_warm_start": (4096, 1000), "small": (8, 2)}.get(spec, (512, 250))  # fmt: skip
    assert (config.advantage.step_credit is None) == (spec in ("recipe", "replay", "long_warm_start"))
    assert (config.sources[0].replay is None) == (spec != "replay")
    assert (config.loss.tis_cap is None) == (spec != "replay")


def test_the_xdesktop_suite_evaluates_every_family_as_its_own_source():
    from harnesses.xdesktop.tasks import FAMILIES

    config = load_recipe(str(EXAMPLES / "train_xdesktop.py:suite"), [])
    assert [s.env.tasks for s in config.sources] == [[f] for f in FAMILIES] and config.steps == 0


@pytest.mark.parametrize("spec", ["train_web_app.py:mail", "train_miniwob.py:every_task"])
def test_the_variants_draw_several_tasks_the_harness_offers(spec):
    (source,) = load_recipe(str(EXAMPLES / spec), []).sources
    offered = resolve(source.codebase).tasks  # miniwob: the tasks with an oracle
    assert len(source.env.tasks) > 1 and set(source.env.tasks) <= set(offered)
