"""docs/first-harness.md cannot rot: its files are cut out of the Markdown and run. The harness
passes the contract, the guide's own test passes, the entry point names the class, the recipe
loads with settings the constructor takes, and every rule the checker has is documented."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from pathlib import Path

import pytest

from vlrl.cli import main
from vlrl.config import load_recipe
from vlrl.harness import check_harness, resolve
from vlrl.harness.checker import ORACLE_MIN_SOLVE_RATE, contract, factory_rules

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "first-harness.md"
FILES = {"counter_harness.py", "test_counter_harness.py", "pyproject.toml", "train_counter.py"}


def guide_files() -> dict[str, str]:
    """Each code block whose first line is ``# FILENAME``, by file name (list indentation removed)."""
    blocks = re.finditer(r"^( *)```(?:python|toml)\n\1# (\S+)\n(.*?)^\1```$", GUIDE.read_text(), re.MULTILINE | re.DOTALL)
    return {m[2]: textwrap.dedent(f"{m[1]}# {m[2]}\n{m[3]}") for m in blocks}


@pytest.fixture
def guide(tmp_path, monkeypatch):
    """The guide's files in a folder on ``sys.path``, and its harness module imported from there."""
    for name, text in guide_files().items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = ("counter_harness", "test_counter_harness")
    for name in modules:
        sys.modules.pop(name, None)
    yield tmp_path, importlib.import_module("counter_harness")
    for name in modules:
        sys.modules.pop(name, None)


def test_the_guide_holds_every_file_it_talks_about():
    assert set(guide_files()) == FILES


def test_the_guides_harness_keeps_the_contract(guide):
    _, module = guide
    check_harness(module.CounterHarness, seeds=tuple(range(8)))
    rules = list(contract(module.CounterHarness, settings={"width": 200, "height": 150}))
    assert rules[2] == "screen size: width=200, height=150 as set" and "oracle: solved 8/8 episodes (100%)" in rules
    assert rules[-2].startswith("replay: ") and rules[-1] == "fork: none (branches replay)"  # the counter replays
    assert list(contract(module.CounterHarness))[2] == "screen size: width=160, height=120 by default"
    importlib.import_module("test_counter_harness").test_counter_harness_keeps_the_contract()


def test_the_entry_point_names_the_harness(guide):
    tomllib = pytest.importorskip("tomllib")
    folder, module = guide
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["vlrl.harnesses"]["counter"]
    module_name, _, attribute = target.partition(":")
    assert getattr(importlib.import_module(module_name), attribute) is module.CounterHarness
    assert project["tool"]["setuptools"]["py-modules"] == [module_name]


def test_the_recipe_registers_the_harness_and_its_settings_reach_the_constructor(guide):
    folder, module = guide
    for variant in ("recipe", "small", "oracle"):
        config = load_recipe(f"{folder / 'train_counter.py'}:{variant}")
        (source,) = config.sources
        assert source.codebase == "counter" and config.pool.budget.shares["counter"] > 0
    assert resolve("counter") is module.CounterHarness
    harness = module.CounterHarness(**source.env.as_kwargs())  # what every env host builds
    try:
        obs, info = harness.reset(seed=0)
        assert obs.screenshot.shape == (120, 160, 3) and harness.span == 2 and info["task"] in harness.tasks
    finally:
        harness.close()


def test_vlrl_check_takes_the_guides_path_and_recipe(guide, capsys):
    folder, _ = guide
    text = GUIDE.read_text()
    for command in ("vlrl check harness counter_harness:CounterHarness", "vlrl check harness counter --recipe train_counter.py"):
        assert command in text, command
    assert main(["check", "harness", "counter_harness:CounterHarness"]) == 0
    assert "pass  screen size: width=160, height=120 by default\n" in capsys.readouterr().out
    recipe = f"{folder / 'train_counter.py'}:small"
    assert main(["check", "harness", "counter", "--recipe", recipe]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"settings of {recipe}'s source: {{'width': 160, 'height': 120, 'max_steps': 3, 'span': 2}}\n")
    assert "pass  screen size: width=160, height=120 as set\n" in out and "pass  oracle: solved 8/8" in out


def test_the_guide_names_the_penalties_a_harness_never_gave():
    from vlrl.config import AgentBehaviour
    from vlrl.job.train_job import TrainJob

    text = " ".join(GUIDE.read_text().split())
    assert f"`AgentBehaviour.format_penalty` (default {AgentBehaviour().format_penalty:g}" in text
    assert TrainJob.Config().advantage.overlong is None and "only when a recipe sets `advantage.overlong`" in text


def test_the_guide_lists_every_rule_the_checker_enforces(guide):
    _, module = guide
    text = GUIDE.read_text()
    rules = [*factory_rules(module.CounterHarness), *(rule.split(":")[0] for rule in contract(module.CounterHarness))]
    assert len(rules) == 13
    for rule in rules:
        assert f"`{rule}`" in text, rule
    assert f"`ORACLE_MIN_SOLVE_RATE` ({ORACLE_MIN_SOLVE_RATE})" in text
