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
    """Background threads for blocking work (env operations, image encoding, tokenization)."""

    tenant_timeout_s: Annotated[float, Gt(0)] = 600.0
    """A tenant (loop hosts) or one harness call (env hosts) running longer is stopped and reported."""

    blocking_on_threads: bool = True
    """Run blocking calls on threads; False runs them on the event loop (only to measure what threads buy)."""

    cpus: Annotated[float, Ge(0)] = 0.0
    """Ray logical CPUs each host reserves (0 lets hosts share CPUs; raise it to spread hosts over nodes)."""

    @property
    def max_concurrency(self) -> int:
        """Ray concurrent calls per host: every tenant plus headroom for control calls."""
        return self.max_tenants + 16

    def start(self, host_class: type, name: str, *args: Any) -> Any:
        """Start one host actor of ``host_class`` with these explicit limits, spread over nodes."""
        import ray

        return (
            ray.remote(host_class)
            .options(
                name=name,
                namespace="vlrl",
                num_cpus=self.cpus,
                max_concurrency=self.max_concurrency,
                scheduling_strategy="SPREAD",
            )
            .remote(*args)
        )
