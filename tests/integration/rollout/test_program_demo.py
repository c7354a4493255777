"""An agent program's warm-start demonstrations and baselines, played through the program itself:
examples/agents/counter_agent.py (openai, the standard library and Pillow) as a real subprocess
against the traced endpoint over HTTP, its replies written by a teacher script
(counter_teacher.py) or by the baselines' scripted clicks. A won run is stored as one multi-turn
sequence whose loss covers exactly the teacher's replies; a lost one leaves no key."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoProcessor

from vlrl.config import AgentBehaviour, DataSource, ExternalAgent
from vlrl.job.baselines import ProgramSweep, SweepResult, grid_points
from vlrl.job.demos import ProgramDemo
from vlrl.mm import delete_sequences, patch_rule_of
from vlrl.pool.tenant import TenantContext
from vlrl.records import LOSS_MASK, TOKEN_IDS
from vlrl.rollout.agent_loop import LoopRuntime
from vlrl.rollout.external.teacher import ProgramTeacher
from vlrl.store import LocalStore

AGENTS = Path(__file__).resolve().parents[3] / "examples" / "agents"
sys.path.insert(0, str(AGENTS))
import counter_agent  # noqa: E402

LOSING = "def teacher(messages, seed, task):\n    return 'click(0, 0)'\n"
"""A teacher whose clicks miss every button."""


def play(tiny_path, tenant):
    """Run one tenant on a loop host's runtime with no engine (a teacher answers); (value, store)."""
    processor = AutoProcessor.from_pretrained(tiny_path)
    store = LocalStore()
    threads = ThreadPoolExecutor(2)
    runtime = LoopRuntime(client=None, tokenizer=processor.tokenizer, patch_rule=patch_rule_of(processor), store=store, processor=processor)

    async def main():
        async def blocking(fn, *args):
            return await asyncio.get_running_loop().run_in_executor(threads, fn, *args)

        return await tenant.run(TenantContext("demo/1.1", {"runtime": runtime}, blocking, None))

    try:
        return asyncio.run(main()), store, processor
    finally:
        threads.shutdown()


def source() -> DataSource:
    return DataSource(
        name="counter",
        external=ExternalAgent(command=[sys.executable, str(AGENTS / "counter_agent.py"), "--seed", "{seed}"], time_limit_s=120),
        agent=AgentBehaviour(max_turns=4, max_tokens=24, action_format="pyautogui"),
    )


def test_a_won_run_against_the_teacher_is_one_sequence_of_its_replies(tiny_path):
    seed = 11
    game = counter_agent.Counter(seed)
    clicks = abs(game.goal - game.now)
    teacher = ProgramTeacher(script=f"{AGENTS / 'counter_teacher.py'}:teacher")
    result, store, processor = play(tiny_path, ProgramDemo(source(), seed=seed, teacher=teacher))
    assert result.reason == "" and len(result.metas) == 1  # each turn resent the conversation: spliced
    meta = result.metas[0]
    assert (meta.turns, meta.success, meta.reward) == (clicks, True, 1.0)
    assert len(meta.images) == clicks  # a fresh screenshot each turn, NOW moving toward GOAL
    row = store.get([meta.key], fields=[TOKEN_IDS, LOSS_MASK])[meta.key]
    taught = processor.tokenizer.decode(row[TOKEN_IDS][row[LOSS_MASK]])
    sys.path.insert(0, str(AGENTS))
    from counter_teacher import teacher as reply

    expected = reply([], seed, "")  # the teacher clicks the same button until GOAL
    assert taught == f"{expected}<|im_end|>" * clicks
    delete_sequences(store, list(result.metas))
    assert store.stats().keys == 0


def test_a_lost_run_is_dropped_with_its_reason_and_leaves_no_key(tiny_path, tmp_path):
    (tmp_path / "losing.py").write_text(LOSING)
    teacher = ProgramTeacher(script=f"{tmp_path / 'losing.py'}:teacher")
    result, store, _ = play(tiny_path, ProgramDemo(source(), seed=11, teacher=teacher))
    assert result.metas == () and result.reason == "the program did not report a success"
    assert store.stats().keys == 0


@pytest.mark.parametrize("policy", ["random", "constant"])
def test_baselines_play_the_program_with_scripted_clicks(tiny_path, policy):
    seed = 11
    result, store, _ = play(tiny_path, ProgramSweep(source(), seed, policy, grid=(4, 3)))
    assert isinstance(result, SweepResult) and store.stats().keys == 0  # played, never stored
    if policy == "constant":
        game = counter_agent.Counter(seed)
        right = "+" if game.goal > game.now else "-"
        # a point wins exactly when it lies on the button that moves NOW toward GOAL
        expected = tuple(game.button_at(x, y) == right for x, y in grid_points(counter_agent.WIDTH, counter_agent.HEIGHT, (4, 3)))
        assert result.wins == expected and result.points == grid_points(160, 120, (4, 3))
    else:
        assert len(result.wins) == 1
