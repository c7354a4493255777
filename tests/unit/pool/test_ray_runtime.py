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
