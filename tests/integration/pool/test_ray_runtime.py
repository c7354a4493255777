"""A local Ray started by vlrl keeps Ray's token authentication as the environment has it (here
unset: Ray's default, token authentication on, without Ray's warning inviting to turn it off)
and listens on loopback only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


PROBE = textwrap.dedent(
    """
    import json, os, psutil, ray
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
    print(json.dumps({"auth": os.environ.get("RAY_AUTH_MODE"), "node": node, "gcs": ray.get_runtime_context().gcs_address, "listening": listening}))
    ray.shutdown()
    """
)


def test_a_local_ray_listens_on_loopback_only_with_token_authentication_unremarked():
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["auth"] == "token"  # Ray turned it on, as it does for any new local node
    assert "RAY_AUTH_MODE=disabled" not in done.stderr, done.stderr[-2000:]
    assert found["node"] == "127.0.0.1" and found["gcs"].startswith("127.0.0.1:")
    assert found["listening"] and set(found["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1"}, found
