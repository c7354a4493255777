"""Limits of one host actor, the same for every host of a pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from vlrl.config import Ge, Gt


@dataclass(kw_only=True, slots=True)
class HostConfig:
    """Explicit concurrency limits of a host (no hidden Ray default such as 1000 async calls)."""

    max_tenants: Annotated[int, Ge(1)] = 256
    """Tenants (Agent Loops or leased harness instances) one host runs at once; the pool queues the rest."""

    threads: Annotated[int, Ge(1)] = 8
    """Loop hosts: threads for blocking work (image encoding, tokenization); env hosts: harness
    calls running at once (each on the Ray thread that took it)."""

    tenant_timeout_s: Annotated[float, Gt(0)] = 600.0
    """A tenant (loop hosts) or one harness call (env hosts) running longer is stopped and reported."""

    blocking_on_threads: bool = True
    """Env hosts: run harness calls side by side on threads; False runs them one at a time, as
    on an event loop (only to measure what threads buy)."""

    cpus: Annotated[float, Ge(0)] = 0.0
    """Ray logical CPUs each host reserves (0 lets hosts share a node's CPUs)."""

    @property
    def max_concurrency(self) -> int:
        """Ray concurrent calls per host: every tenant plus headroom for control calls."""
        return self.max_tenants + 16

    def start(self, host_class: type, name: str, slot: int, *args: Any) -> Any:
        """Start the host of pool slot ``slot`` (its first constructor argument) with these explicit
        limits. Slots go round-robin over the cluster's alive nodes, so a pool spreads over nodes
        and a replaced host returns to its slot's node. A host reserving no CPUs always fits, so
        it is pinned; one reserving CPUs may fall back to another node when its own is full."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
        strategy: Any = "SPREAD"
        if len(nodes) > 1:
            strategy = NodeAffinitySchedulingStrategy(nodes[slot % len(nodes)], soft=self.cpus > 0)
        return (
            ray.remote(host_class)
            .options(
                name=name,
                namespace="vlrl",
                num_cpus=self.cpus,
                max_concurrency=self.max_concurrency,
                scheduling_strategy=strategy,
            )
            .remote(slot, *args)
        )
