"""Joining or starting the Ray cluster a run uses."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated

from vlrl.config import Ge


@dataclass(kw_only=True, slots=True)
class RayRuntime:
    """A local Ray started for the run, or an existing cluster joined by address."""

    address: str | None = None
    """Address of a running cluster ('auto' or host:port, from `ray start --head`); None starts a local Ray."""

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
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local cluster needs no tokens
        ray.init(
            num_cpus=self.num_cpus,
            include_dashboard=False,
            object_store_memory=self.object_store_mb * 1024**2,
            log_to_driver=False,
        )
        return True
