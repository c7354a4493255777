"""Prove the Ray-cluster path on one machine: start a two-node Ray cluster, run a recipe on it
with ``--set ray.address=...``, and check that the Harness Pool's hosts landed on both nodes.

    .venv/bin/python scripts/ray_cluster_check.py                          # the default recipe
    .venv/bin/python scripts/ray_cluster_check.py vlrl rollout examples/policy_rollout.py

A real cluster is the same with ``ray start --head`` on one machine, ``ray start --address=HEAD:6379``
on the others, and ``--set ray.address=auto`` (see docs/cluster.md). The two "nodes" here are two
raylets of ``ray.cluster_utils.Cluster`` on this machine, each with its own object store.
Prints one JSON line: nodes, hosts per node, and the job's exit code; exits non-zero unless the
job succeeded and the hosts used both nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

DEFAULT_COMMAND = ["vlrl", "rollout", "examples/policy_rollout.py"]
HOST_CLASSES = ("LoopHost", "EnvHost")


def main(command: list[str]) -> int:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "object_store_memory": 300 * 1024**2, "include_dashboard": True},  # the state API
    )
    cluster.add_node(num_cpus=2, object_store_memory=300 * 1024**2)
    cluster.wait_for_nodes()
    seen: dict[str, set[str]] = {}  # actor id -> node id, for every pool host seen alive
    stop = threading.Event()
    os.environ["RAY_ADDRESS"] = cluster.address  # the state API finds the head's dashboard from it
    _wait_for_state_api(timeout_s=120)
    watcher = threading.Thread(target=_watch, args=(seen, stop), daemon=True)
    watcher.start()
    try:
        job = subprocess.run([*command, "--set", f"ray.address={cluster.address}"], env=os.environ, check=False)
    finally:
        stop.set()
        watcher.join(timeout=10)
        cluster.shutdown()
    nodes = {node for node_ids in seen.values() for node in node_ids}
    per_node = {node[:8]: sum(node in ids for ids in seen.values()) for node in sorted(nodes)}
    ok = job.returncode == 0 and len(nodes) >= 2
    print(json.dumps({"nodes": len(nodes), "hosts_per_node": per_node, "job_returncode": job.returncode, "ok": ok}))
    return 0 if ok else 1


def _wait_for_state_api(timeout_s: float) -> None:
    """The dashboard starts after the nodes; a job watched before it answers would go unseen."""
    from ray.util.state import list_nodes

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            list_nodes()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _watch(seen: dict[str, set[str]], stop: threading.Event) -> None:
    """Record the node of every alive pool host until ``stop`` (state API polls, once a second)."""
    from ray.util.state import list_actors

    while not stop.is_set():
        try:
            for actor in list_actors(filters=[("state", "=", "ALIVE")], raise_on_missing_output=False):
                if actor.class_name in HOST_CLASSES:
                    seen.setdefault(actor.actor_id, set()).add(actor.node_id)
        except Exception:  # the state API is not up yet, or going down: try again
            pass
        stop.wait(1.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT_COMMAND))
