"""An error raised in an env host reaches the user whole: its type and message, the harness and
the call, with no terminal colour codes and nothing cut; an action the harness refuses still
comes back as the agent's ``ActionError``."""

from __future__ import annotations

import asyncio

import pytest

from vlrl.harness import register
from vlrl.pool import HarnessPool, HostBudget, HostConfig, ScriptedEpisode
from vlrl.pool.remote_errors import EnvCallError, cause_of, describe

register("light", "tests.helpers.light_harness:LightHarness")

LONG = "x" * 300
"""A message longer than any summary used to keep."""


def test_a_harness_constructor_error_names_the_harness_the_call_and_the_whole_cause(ray_session):
    pool = HarnessPool.Config(
        budget=HostBudget(total_hosts=2, shares={"loop": 1, "light": 1}),
        loop_host=HostConfig(max_tenants=8),
        env_host=HostConfig(max_tenants=8),
        max_attempts=1,
    ).build()
    try:
        outcome = asyncio.run(
            pool.run(ScriptedEpisode(seed=0), codebase="light", env_settings={"tasks": ("reach",)})
        )
    finally:
        pool.shutdown()
    assert outcome.status == "failed"
    first = outcome.error.splitlines()[0]
    assert "harness 'light': EnvHost.open()+reset() raised TypeError" in first  # opened by the first reset
    assert first.endswith("TypeError: LightHarness.__init__() got an unexpected keyword argument 'tasks'")
    assert "\x1b[" not in outcome.error and "RayTaskError" not in first


def test_describe_unwraps_ray_s_wrapper_and_strips_colours(ray_session):
    ray = ray_session

    @ray.remote
    def boom():
        raise ValueError(f"\x1b[31mred\x1b[0m {LONG}")

    with pytest.raises(Exception) as caught:
        ray.get(boom.remote())
    text = describe(caught.value)
    assert text == f"ValueError: red {LONG}"


def test_an_env_call_error_crosses_ray_with_its_type_fields_and_whole_message(ray_session):
    ray = ray_session

    @ray.remote
    def relay():
        raise EnvCallError("light", "step()", TimeoutError(f"stuck {LONG}"))

    with pytest.raises(Exception) as caught:
        ray.get(relay.remote())
    cause = cause_of(caught.value)
    assert type(cause) is EnvCallError  # not UnserializableException
    assert str(cause) == f"harness 'light': EnvHost.step() raised TimeoutError: stuck {LONG}"
    assert (cause.codebase, cause.call, str(cause.cause)) == ("light", "step()", f"stuck {LONG}")
