"""Joining or starting the Ray cluster a run uses.

vlrl never turns Ray's token authentication off: whoever reaches a Ray cluster's ports can run
code on it (recipe modules travel to the workers by value), so a local Ray started here is kept
to loopback, and a cluster is the deployment's to keep private (``docs/cluster.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from vlrl.config import Ge

LOOPBACK = "127.0.0.1"


@dataclass(kw_only=True, slots=True)
class RayRuntime:
    """A local Ray started for the run, or an existing cluster joined by address."""

    address: str | None = None
    """Address of a running cluster ('auto' or host:port, from `ray start --head`); None starts a
    private local Ray on loopback (never one that `ray start` left running on the machine)."""

    num_cpus: Annotated[int, Ge(1)] | None = None
    """Logical CPUs of a local Ray (None: the machine's cores)."""

    object_store_mb: Annotated[int, Ge(128)] = 1024
    """Object store size of a local Ray, in MiB."""

    def ensure(self) -> bool:
        """Connect if this process is not connected yet; True when this call started the connection."""
        import ray

        if ray.is_initialized():
            return False
        if self.address is not None:
            ray.init(address=self.address, log_to_driver=False)
            return True
        with _single_machine():
            ray.init(
                address="local",
                _node_ip_address=LOOPBACK,
                num_cpus=self.num_cpus,
                include_dashboard=False,
                object_store_memory=self.object_store_mb * 1024**2,
                log_to_driver=False,
            )
        return True


@contextmanager
def _single_machine() -> Iterator[None]:
    """Keep Ray's node address on loopback while a local node starts. On Linux ``ray.init`` turns a
    loopback ``_node_ip_address`` into the machine's routable address (so that other nodes could
    join) unless Ray is told it runs no cluster; its servers then listen on loopback only."""
    from ray._private import ray_constants

    cluster = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = cluster
