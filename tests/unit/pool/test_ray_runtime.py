"""A local Ray started by vlrl keeps Ray's token authentication as the environment has it and asks for
loopback only (``ray.init`` stood in for). A real start in a subprocess is
tests/integration/pool/test_ray_runtime.py."""

from __future__ import annotations

import os

from vlrl.pool.ray_runtime import RayRuntime


def test_a_local_start_leaves_auth_alone_and_asks_for_loopback(monkeypatch):
    import ray
    from ray._private import ray_constants

    calls = []
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append((kwargs, ray_constants.ENABLE_RAY_CLUSTER)))
    cluster = ray_constants.ENABLE_RAY_CLUSTER

    assert RayRuntime(num_cpus=2).ensure() is True
    ((kwargs, cluster_during_init),) = calls
    assert "RAY_AUTH_MODE" not in os.environ  # token authentication stays Ray's default
    assert not any("auth" in str(value).lower() for value in kwargs.values())
    assert kwargs["address"] == "local" and kwargs["_node_ip_address"] == "127.0.0.1"
    assert kwargs["include_dashboard"] is False and kwargs["num_cpus"] == 2
    assert cluster_during_init is False and ray_constants.ENABLE_RAY_CLUSTER is cluster  # restored after


def _slow_raylet(monkeypatch, failures: int) -> list[int]:
    """``ray.init`` stood in for: Ray's raylet-registration error ``failures`` times, then a start."""
    import ray

    tries: list[int] = []

    def init(**kwargs):
        tries.append(len(tries) + 1)
        if len(tries) <= failures:
            raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    return tries


def test_a_raylet_that_misses_rays_fixed_wait_is_started_again_within_the_bound(monkeypatch, caplog):
    tries = _slow_raylet(monkeypatch, failures=2)
    assert RayRuntime(startup_timeout_s=60).ensure() is True
    assert tries == [1, 2, 3]
    retries = [r.getMessage() for r in caplog.records if "starting it again" in r.getMessage()]
    assert len(retries) == 2 and "try 1" in retries[0] and "ray.startup_timeout_s=60" in retries[0]


def test_past_the_bound_the_error_names_the_setting_the_tries_and_the_load(monkeypatch):
    import pytest

    from vlrl.pool.ray_runtime import RayStartupTimeout

    tries = _slow_raylet(monkeypatch, failures=10)
    with pytest.raises(RayStartupTimeout, match=r"did not start in 1 tries .*load average .*ray.startup_timeout_s"):
        RayRuntime(startup_timeout_s=1e-9).ensure()
    assert tries == [1]


def test_other_start_errors_are_not_retried(monkeypatch):
    import pytest
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: (_ for _ in ()).throw(ValueError("bad object store size")))
    with pytest.raises(ValueError, match="bad object store size"):
        RayRuntime().ensure()
