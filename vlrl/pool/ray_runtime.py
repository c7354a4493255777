"""Joining or starting the Ray cluster a run uses.

vlrl never turns Ray's token authentication off: whoever reaches a Ray cluster's ports can run
code on it (recipe modules travel to the workers by value), so a local Ray started here is kept
to loopback, and a cluster is the deployment's to keep private (``docs/cluster.md``).

With ``RAY_AUTH_MODE`` unset, a new local Ray turns token authentication on (Ray's default) and
warns "Set RAY_AUTH_MODE=disabled to opt out", which invites the one change that makes the node
unsafe; vlrl drops that one warning for the local start it makes. Authentication stays as Ray
sets it; a mode set in the environment is Ray's to honour, and a joined cluster is untouched.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from vlrl.config import Ge, Gt
from vlrl.pool.host_startup import load_average

log = logging.getLogger(__name__)

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

    startup_timeout_s: Annotated[float, Gt(0)] = 300.0
    """Seconds a local Ray may take to start. Ray gives its raylet a fixed 30 s to register ("The
    current node timed out during startup"), which a loaded machine can miss (seen at load average
    20-36 on 2 cores); vlrl starts it again, logging each try, until this bound is spent."""

    def ensure(self) -> bool:
        """Connect if this process is not connected yet; True when this call started the connection."""
        import ray

        if ray.is_initialized():
            return False
        if self.address is not None:
            ray.init(address=self.address, log_to_driver=False)
            return True
        start, attempt = time.monotonic(), 0
        while True:
            attempt += 1
            try:
                self._start_local()
                return True
            except Exception as error:  # Ray raises a bare Exception for a slow raylet
                if RAYLET_TIMEOUT not in str(error):
                    raise
                ray.shutdown()
                spent = time.monotonic() - start
                if spent >= self.startup_timeout_s:
                    raise RayStartupTimeout(
                        f"a local Ray did not start in {attempt} tries over {spent:.0f} s (load average"
                        f" {load_average()}): each time its raylet missed Ray's fixed {RAYLET_WAIT_S} s to register"
                        f" (Ray's logs: {RAY_LOGS}). Raise ray.startup_timeout_s, give the run a less loaded"
                        " machine, or start Ray beforehand (`ray start --head`) and join it with ray.address"
                    ) from error
                log.warning(
                    "a local Ray did not start (try %d, %.0f s of ray.startup_timeout_s=%g spent, load average %s):"
                    " its raylet missed Ray's fixed %d s to register; starting it again",
                    attempt, spent, self.startup_timeout_s, load_average(), RAYLET_WAIT_S,
                )  # fmt: skip

    def _start_local(self) -> None:
        import ray

        with _single_machine(), _without_opt_out_warning():
            ray.init(
                address="local",
                _node_ip_address=LOOPBACK,
                num_cpus=self.num_cpus,
                include_dashboard=False,
                object_store_memory=self.object_store_mb * 1024**2,
                log_to_driver=False,
            )


RAYLET_TIMEOUT = "timed out during startup"
"""Words of Ray's error when its raylet did not register in time."""
RAYLET_WAIT_S = 30
"""Ray's fixed wait for a new raylet to register (``ray/_private/node.py``)."""
RAY_LOGS = "/tmp/ray/session_latest/logs"
"""Where a local Ray's processes log (raylet.out, gcs_server.out)."""


class RayStartupTimeout(RuntimeError):
    """A local Ray that did not start within ``RayRuntime.startup_timeout_s``."""


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


OPT_OUT_WARNING = "Set RAY_AUTH_MODE=disabled to opt out"
"""The words of Ray's warning when a new local node turns token authentication on by default."""


class _DropOptOutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return OPT_OUT_WARNING not in record.getMessage()


@contextmanager
def _without_opt_out_warning() -> Iterator[None]:
    """While a local node starts with ``RAY_AUTH_MODE`` unset, drop Ray's warning that token
    authentication is on and how to turn it off: on is what a loopback node should be."""
    if "RAY_AUTH_MODE" in os.environ:  # Ray warns of nothing when the mode is set
        yield
        return
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    drop = _DropOptOutWarning()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
