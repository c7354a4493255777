"""Prove the Ray-cluster path on one machine: start a two-node Ray cluster, run a rollout recipe on
it with ``--set ray.address=...``, and check from the job's own summary (``host_nodes``: the node
of every pool host) that the Harness Pool's hosts landed on both nodes.

    .venv/bin/python scripts/ray_cluster_check.py
    .venv/bin/python scripts/ray_cluster_check.py vlrl rollout examples/policy_rollout.py:mixed

A real cluster is the same with ``ray start --head`` on one machine, ``ray start --address=HEAD:6379``
on the others, and ``--set ray.address=auto`` (see docs/cluster.md). The two "nodes" here are two
raylets of ``ray.cluster_utils.Cluster`` on this machine, each with its own object store.
Prints one JSON line (nodes used, hosts per node, the job's exit code) and exits non-zero unless
the job succeeded and its hosts used both nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

DEFAULT_COMMAND = ["vlrl", "rollout", "examples/policy_rollout.py"]


def main(command: list[str]) -> int:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "object_store_memory": 300 * 1024**2, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=2, object_store_memory=300 * 1024**2)
    cluster.wait_for_nodes()
    try:
        _wait_until_schedulable(cluster.address)
        job = subprocess.run(
            [*command, "--set", f"ray.address={cluster.address}"], stdout=subprocess.PIPE, text=True, check=False
        )
    finally:
        cluster.shutdown()
    sys.stdout.write(job.stdout)
    summary = _last_json(job.stdout)
    hosts = Counter(node[:8] for nodes in summary.get("host_nodes", {}).values() for node in nodes)
    ok = job.returncode == 0 and len(hosts) >= 2
    print(json.dumps({"nodes": len(hosts), "hosts_per_node": dict(hosts), "job_returncode": job.returncode, "ok": ok}))
    return 0 if ok else 1


def _wait_until_schedulable(address: str) -> None:
    """Run a task pinned to each node: a raylet that just joined may not take work yet, and the
    pool's soft node affinity would then place its hosts elsewhere."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address, log_to_driver=False)
    try:
        probe = ray.remote(num_cpus=0)(lambda: ray.get_runtime_context().get_node_id())
        nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
        pinned = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote() for n in nodes]
        assert sorted(ray.get(pinned, timeout=120)) == sorted(nodes)
    finally:
        ray.shutdown()


def _last_json(stdout: str) -> dict:
    """The job's summary: its last stdout line that parses as a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT_COMMAND))
