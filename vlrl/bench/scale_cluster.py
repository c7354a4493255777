"""A Ray cluster of several simulated nodes on this machine, for ``vlrl bench scale``.

Ray's own ``ray.cluster_utils.Cluster`` starts one raylet per node, each with its own object
store, and one GCS on the head; this process connects to it as the driver. The pool's hosts and
the store's shards go round-robin over the nodes, so objects cross object stores as they would
between machines. The GCS and raylet process ids are kept so the bench can read their CPU,
memory and descriptors from ``/proc``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ray


@dataclass(frozen=True, slots=True)
class SimulatedCluster:
    address: str
    nodes: int
    gcs_pid: int
    raylet_pids: tuple[int, ...]


@contextmanager
def simulated_cluster(nodes: int, *, cpus_per_node: int = 2, object_store_mb: int = 1024) -> Iterator[SimulatedCluster]:
    """Start ``nodes`` simulated nodes, connect this process as the driver, and end them after.
    Payload chunks over 4 KiB (here the routing records) are Ray objects in the writing loop host's
    node's object store; smaller ones stay in the store's shards. ``object_store_mb`` is a cap:
    only what is written is allocated."""
    if ray.is_initialized():
        raise RuntimeError(
            "vlrl bench scale starts a multi-node Ray cluster of its own; this process is already connected"
            " to a Ray (run the bench in a process of its own)"
        )
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    node_args = {"num_cpus": cpus_per_node, "object_store_memory": object_store_mb * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**node_args)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        _wait_until_schedulable()
        raylets = tuple(_pid(node, ray_constants.PROCESS_TYPE_RAYLET) for node in cluster.list_all_nodes())
        gcs = _pid(cluster.head_node, ray_constants.PROCESS_TYPE_GCS_SERVER)
        yield SimulatedCluster(cluster.address, nodes, gcs, raylets)
    finally:
        ray.shutdown()
        cluster.shutdown()


def _pid(node: Any, process_type: str) -> int:
    return node.all_processes[process_type][0].process.pid


def _wait_until_schedulable() -> None:
    """A task pinned to each node: a raylet that just joined may not take work yet, and hosts
    pinned to it would wait."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(lambda: ray.get_runtime_context().get_node_id())
    nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    pinned = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote() for n in nodes]
    if sorted(ray.get(pinned, timeout=120)) != sorted(nodes):
        raise RuntimeError(f"not every simulated node ran a task: {nodes}")
