"""An agent program's command line, its reward line, and the checks that refuse a bad setup
before anything starts (``vlrl.rollout.external.program``; the traced runs themselves are
tests/integration/rollout/test_external_agent.py)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from vlrl.config import ConfigError, ExternalAgent, load_recipe, validate
from vlrl.rollout.external import AgentFailed, AgentReport, parse_report, run_program
from vlrl.rollout.external.program import argv


@pytest.mark.parametrize(
    ("stdout", "report"),
    [
        ("thinking...\n0.75\n\n", AgentReport(0.75, True)),
        ("0", AgentReport(0.0, False)),
        ("-1", AgentReport(-1.0, False)),
        ('{"reward": 0.2, "success": false}', AgentReport(0.2, False)),
        ('{"reward": 0, "success": true}', AgentReport(0.0, True)),
    ],
)
def test_the_last_line_is_the_reward(stdout, report):
    assert parse_report(stdout) == report


@pytest.mark.parametrize(
    "stdout", ["", "done!", "nan", "Infinity", "true", '{"score": 1}', '{"reward": "1"}', '{"reward": 1, "success": "yes"}']
)
def test_anything_else_is_garbage_named_as_such(stdout):
    with pytest.raises(AgentFailed, match="agent's reward is garbage"):
        parse_report(stdout)


def test_task_and_seed_fill_the_command_line():
    agent = ExternalAgent(command=["agent", "--task={task}", "--seed", "{seed}"])
    assert argv(agent, task="click", seed=7) == ["agent", "--task=click", "--seed", "7"]


def test_an_entry_is_called_in_a_fresh_interpreter(tmp_path):
    (tmp_path / "my_agent.py").write_text("def play(task, seed):\n    return {'reward': seed / 10, 'success': task == 'ok'}\n")
    agent = ExternalAgent(entry="my_agent:play", cwd=str(tmp_path), time_limit_s=60)
    report = asyncio.run(run_program(agent, task="ok", seed=3, env={}))
    assert report == AgentReport(0.3, True)


def test_a_program_that_does_not_start_fails_with_its_name():
    agent = ExternalAgent(command=["/no/such/agent"])
    with pytest.raises(AgentFailed, match="agent did not start: '/no/such/agent'"):
        asyncio.run(run_program(agent, task="", seed=0, env={}))


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (ExternalAgent(), "'command': got \\[\\] .*an argv list, or else entry"),
        (ExternalAgent(command=[sys.executable], entry="a:b"), "'command'.*one of the two"),
        (ExternalAgent(entry="my_agent.play"), "'entry': got 'my_agent.play' .*'module:function'"),
    ],
)
def test_a_bad_program_is_refused_naming_the_field(agent, message):
    with pytest.raises(ConfigError, match=message):
        validate(agent)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.chance=true sources[0].agent.action_format=uitars", r"'sources\[0\].agent.action_format'.*with eval.chance, the format the program parses clicks in"),
        ("warm_start=WarmStart", r"'warm_start.teacher': got None.*sources\[0\] is an agent program, which has no oracle"),
        ("sources[0].external.time_limit_s=600", r"'sources\[0\].external.time_limit_s'.*tenant_timeout_s"),
    ],
)
def test_a_run_refuses_what_vlrl_cannot_do_for_a_program(override, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe("examples/train_own_agent.py", override.split())
