"""`ScriptedRollout`: data sources bound to codebases, agent behaviour and env settings, run on
the pool; config errors name the field."""

from __future__ import annotations

import json

import pytest

from vlrl.config import AgentBehaviour, ConfigError, DataSource, EnvSettings, apply_overrides, validate
from vlrl.harness import register
from vlrl.pool import HarnessPool, HostBudget
from vlrl.pool.ray_runtime import RayRuntime
from vlrl.pool.scripted_rollout import ScriptedRollout

register("light", "tests.helpers.light_harness:LightHarness")
register("light-other", "tests.helpers.light_harness:OtherLightHarness")


def _config(**changes) -> ScriptedRollout.Config:
    config = ScriptedRollout.Config(
        pool=HarnessPool.Config(budget=HostBudget(total_hosts=3, shares={"loop": 1, "light": 1, "light-other": 1})),
        sources=[
            DataSource(name="a", codebase="light", env=EnvSettings(params={"step_s": 0.01})),
            DataSource(name="b", codebase="light-other", agent=AgentBehaviour(max_turns=1), env=EnvSettings(params={"long_every": 1})),
        ],
        episodes_per_source=6,
    )
    for name, value in changes.items():
        setattr(config, name, value)
    return validate(config)


def test_each_source_runs_on_its_own_pool_with_its_own_settings(ray_session, capsys):
    summary = _config().build().run()
    assert summary["pool_sizes"] == {"loop": 1, "light": 1, "light-other": 1}
    # Source a: two-step episodes solved by the oracle. Source b: ten-step episodes cut at one turn.
    assert summary["sources"]["a"] == {"episodes": 6, "failed": 0, "success_rate": 1.0, "mean_steps": 2.0}
    assert summary["sources"]["b"] == {"episodes": 6, "failed": 0, "success_rate": 0.0, "mean_steps": 1.0}
    assert summary["book"]["submitted"] == summary["book"]["ok"] == 12
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == summary


def test_a_source_without_an_env_pool_is_refused():
    config = _config()
    with pytest.raises(ConfigError, match=r"'sources\[1\].codebase': got 'light-other'.*env pool"):
        apply_overrides(config, ["pool.budget.shares={\"loop\": 1, \"light\": 1}"])


def test_an_unregistered_codebase_is_refused():
    config = _config()
    config.sources[0].codebase = "nope"
    with pytest.raises(ConfigError, match=r"'sources\[0\].codebase': got 'nope'.*registered harness codebase"):
        validate(config)


def test_agent_and_env_settings_are_validated_apart():
    with pytest.raises(ConfigError, match=r"'top_p': got 1.5"):
        validate(AgentBehaviour(top_p=1.5))
    with pytest.raises(ConfigError, match=r"'width': got 10"):
        validate(EnvSettings(width=10))
    assert EnvSettings(width=320, tasks=["x"], params={"distractors": 2}).as_kwargs() == {
        "width": 320,
        "tasks": ("x",),
        "distractors": 2,
    }


def test_ray_runtime_joins_a_running_ray_without_restarting_it(ray_session):
    assert RayRuntime().ensure() is False
