"""``job.rollout_runtime.RolloutRuntime``, the one rollout side of ``vlrl train``, ``vlrl eval``
and ``vlrl rollout``: what it started ends when its block ends, also when a later step of its
start fails, and a bad screenshot budget is refused before anything starts."""

from __future__ import annotations

import time

import pytest

from vlrl.config import AgentBehaviour, ConfigError, DataSource, EnvSettings
from vlrl.job.policy_rollout import PolicyRollout
from vlrl.job.rollout_runtime import RolloutRuntime
from vlrl.pool import HostBudget
from vlrl.pool.host_startup import HostStartupTimeout


def _config(tiny_path, **agent) -> PolicyRollout.Config:
    source = DataSource(name="click", codebase="desktop", agent=AgentBehaviour(**agent), env=EnvSettings(width=160, height=120))
    config = PolicyRollout.Config(model_path=str(tiny_path), sources=[source])
    config.pool.budget = HostBudget(total_hosts=2, shares={"loop": 1, "desktop": 1})
    return config


def _ended(call, within_s: float = 30.0) -> bool:
    """Whether the actor behind ``call`` is gone within ``within_s`` (a call to it raises Ray's
    actor error; ``ray.kill`` ends an actor asynchronously, so a call just after it may still run)."""
    import ray
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + within_s
    while True:
        try:
            ray.get(call(), timeout=60)
        except RayActorError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def _assert_ended(runtime: RolloutRuntime) -> None:
    """The engine killed and the store destroyed (its index shards ended)."""
    from ray.exceptions import RayError

    from vlrl.store import StoreError

    assert runtime.model_path == str(runtime.side.model_path) and len(runtime.engines) == 1
    assert _ended(runtime.engines[0].policy_version.remote)
    with pytest.raises((StoreError, RayError)):
        runtime.keys_left()


def test_the_engines_store_and_pool_end_with_the_block(ray_session, tiny_path):
    runtime = RolloutRuntime(_config(tiny_path))
    with runtime:
        hosts = runtime.pool.loop.hosts()
        assert not _ended(runtime.engines[0].policy_version.remote, within_s=0) and runtime.keys_left() == 0
    assert _ended(hosts[0].pid.remote)
    _assert_ended(runtime)


def test_what_started_ends_when_a_later_step_of_the_start_fails(ray_session, tiny_path):
    config = _config(tiny_path)
    config.pool.startup_timeout_s = 1e-3  # the pool starts last: the store and the engine are up by then
    runtime = RolloutRuntime(config)
    with pytest.raises(HostStartupTimeout), runtime:
        pass
    _assert_ended(runtime)


def test_a_screenshot_budget_the_policy_cannot_meet_is_refused_before_the_store_and_engines(ray_session, tiny_path):
    config = _config(tiny_path, history_images=1, older_images="downscale", older_image_tokens=1)
    runtime = RolloutRuntime(config)
    with pytest.raises(ConfigError, match=r"sources\[0\]\.agent\.older_image_tokens"):
        with runtime:
            pass
    assert runtime.engines == [] and not hasattr(runtime, "store")
