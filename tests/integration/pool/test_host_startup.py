"""Pool start-up on a real Ray: progress while hosts start, and a late host named with its reason."""

from __future__ import annotations

import logging
import time

import pytest

from vlrl.harness import register
from vlrl.pool import HarnessPool, HostBudget, HostConfig
from vlrl.pool.host_pool import HostPool
from vlrl.pool.host_startup import HostStartupTimeout, StartingHost, wait_started
from vlrl.pool.loop_host import LoopHost

register("light", "tests.helpers.light_harness:LightHarness")


def _named_actors() -> set[str]:
    import ray

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}


def test_a_host_that_cannot_be_placed_is_named_with_its_reason_and_nothing_is_left(ray_session):
    before = _named_actors()
    config = HarnessPool.Config(
        budget=HostBudget(total_hosts=2, shares={"loop": 1, "light": 1}),
        env_host=HostConfig(cpus=10_000),  # more logical CPUs than any node has: never placed
        startup_timeout_s=10,  # the loop host starts well within it, even on a loaded machine
    )
    with pytest.raises(HostStartupTimeout) as raised:
        config.build()
    message = str(raised.value)
    assert "1 of 2 hosts" in message and "env-light/host-0.0: waiting for a worker process or for free resources" in message
    assert "pool.startup_timeout_s" in message and "load average" in message
    assert "/loop/" not in message  # the loop host started and is not blamed
    time.sleep(1)
    assert _named_actors() <= before  # both hosts ended by the failed start


def _slow_setup() -> dict:
    time.sleep(6)
    return {}


def test_hosts_still_starting_are_logged_and_a_slow_constructor_is_told_apart(ray_session, caplog):
    pool = HostPool("slow/loop", 1, 8, lambda i, name: HostConfig().start(LoopHost, name, i, HostConfig(), _slow_setup))
    hosts = [StartingHost(pool.name, name, handle) for name, handle in pool.named_hosts()]
    try:
        time.sleep(2)  # the process is up, its constructor sleeping
        with caplog.at_level(logging.WARNING, logger="vlrl.pool.host_startup"):
            with pytest.raises(HostStartupTimeout, match=r"slow/loop/host-0.0: its process \(pid \d+\) is up and has not finished its constructor"):
                wait_started(hosts, timeout_s=2.5, progress_s=1)
            progress = [r.getMessage() for r in caplog.records if "still starting" in r.getMessage()]
            assert progress and "0 of 1 hosts started" in progress[0] and "slow/loop/host-0.0" in progress[0]
        wait_started(hosts, timeout_s=60, progress_s=1)  # the same host answers once its constructor returns
    finally:
        pool.shutdown()
