"""examples/train_own_agent.py:warm_start gives the click agent a policy that can start learning
only if it teaches the replies the agent parses: a demonstrated click, written in the source's
action format and point grid, must be a ``click(x, y)`` that examples/agents/click_agent.py reads
back at the same point."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from vlrl.config import load_recipe
from vlrl.harness import Action
from vlrl.job.action_text import action_text
from vlrl.rollout.parsers import ScreenMap

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _click_agent():
    spec = importlib.util.spec_from_file_location("click_agent", EXAMPLES / "agents" / "click_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_warm_start_writes_clicks_the_click_agent_reads():
    config = load_recipe(f"{EXAMPLES / 'train_own_agent.py'}:warm_start")
    source = config.sources[0]
    screen = ScreenMap(source.env.width, source.env.height, source.env.width, source.env.height)
    text = action_text(Action.click(70, 35), source.agent.action_format, screen, grid=config.warm_start.point_grid)
    match = _click_agent().ACTION.search(text)
    assert match is not None, text
    assert (int(match[1]), int(match[2])) == (70, 35)
