"""A local Ray started by vlrl keeps Ray's token authentication as the environment has it and
listens on loopback only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


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


PROBE = textwrap.dedent(
    """
    import json, psutil, ray
    from vlrl.pool.ray_runtime import RayRuntime

    RayRuntime(num_cpus=1, object_store_mb=128).ensure()
    ray.get(ray.remote(lambda: 1).remote())  # a worker process is up too
    listening = sorted({
        c.laddr.ip
        for p in psutil.Process().children(recursive=True)
        for c in p.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    })
    node = ray.nodes()[0]["NodeManagerAddress"]
    print(json.dumps({"node": node, "gcs": ray.get_runtime_context().gcs_address, "listening": listening}))
    ray.shutdown()
    """
)


def test_a_local_ray_listens_on_loopback_only():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["node"] == "127.0.0.1" and found["gcs"].startswith("127.0.0.1:")
    assert found["listening"] and set(found["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1"}, found
