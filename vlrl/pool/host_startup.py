"""Waiting for a pool's hosts to start, with progress and a reason for each late one.

A host is started when it answers a call: its process is up and its constructor (importing its
harness codebase, building the shared client and tokenizer) has returned. On a loaded machine this
can take minutes, so the wait reports which hosts are still starting every ``progress_s`` seconds,
and a host that misses the bound is named with what Ray knows of it: waiting for a worker process
or for resources, in its constructor (with its pid), or dead (with Ray's death cause).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StartingHost:
    """One host actor being waited for: its pool, its actor name and its handle."""

    pool: str
    name: str
    handle: Any


class HostStartupTimeout(TimeoutError):
    """Hosts that did not answer within the pool's start-up bound, each with its reason."""


def wait_started(
    hosts: Sequence[StartingHost],
    timeout_s: float,
    *,
    progress_s: float = 15.0,
    describe: Callable[[StartingHost], str] | None = None,
) -> None:
    """Block until every host answers (raising a host's own start-up error), logging progress every
    ``progress_s`` seconds; raise ``HostStartupTimeout`` naming each host still starting after
    ``timeout_s`` seconds, with ``describe(host)`` (Ray's view of it by default)."""
    import ray

    describe = describe or ray_view
    refs = {host.handle.in_flight.remote(): host for host in hosts}
    pending = list(refs)
    start = time.monotonic()
    while pending:
        left = timeout_s - (time.monotonic() - start)
        if left <= 0:
            break
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=min(progress_s, left))
        ray.get(ready)  # a host's own start-up error (a codebase that fails to import) surfaces here
        if pending and time.monotonic() - start < timeout_s:
            late = [refs[r] for r in pending]
            log.warning(
                "pool start-up: %d of %d hosts started after %.0f s (load average %s); still starting: %s"
                " (bound: pool.startup_timeout_s=%g)",
                len(hosts) - len(late), len(hosts), time.monotonic() - start, load_average(),
                ", ".join(host.name for host in late), timeout_s,
            )  # fmt: skip
    if pending:
        late = [refs[r] for r in pending]
        lines = "; ".join(f"{host.name}: {describe(host)}" for host in late)
        raise HostStartupTimeout(
            f"{len(late)} of {len(hosts)} hosts of pool(s) {sorted({h.pool for h in late})} did not start within"
            f" {timeout_s:g} s (load average {load_average()}): {lines}. A loaded machine starts hosts slowly:"
            " raise pool.startup_timeout_s, or give the run more CPUs"
        )


def ray_view(host: StartingHost) -> str:
    """What Ray's actor table says of a host that has not answered yet."""
    from ray._private.state import state

    try:
        entry = state.actor_table(host.handle._actor_id.hex())
    except Exception as error:  # the GCS itself may be what is slow
        return f"Ray's actor table did not answer ({type(error).__name__}: {error})"
    return describe_actor(entry)


def describe_actor(entry: dict[str, Any] | None) -> str:
    """A reason, from an entry of Ray's actor table, why an actor has not answered a call."""
    if not entry:
        return "not in Ray's actor table (its creation was never registered)"
    state, pid = entry.get("State"), entry.get("Pid") or 0
    if state == "ALIVE":
        return f"alive (pid {pid}) but has not answered: its event loop or its calls are busy"
    if state == "PENDING_CREATION":
        if pid:
            return (
                f"its process (pid {pid}) is up and has not finished its constructor (importing its codebase,"
                " building its shared client and tokenizer)"
            )
        return "waiting for a worker process or for free resources on a node (Ray has placed no process yet)"
    if state == "DEPENDENCIES_UNREADY":
        return "waiting for its constructor's arguments to be ready"
    if state in ("RESTARTING", "DEAD"):
        cause = str(entry.get("DeathCause") or "").strip() or "no cause recorded"
        return f"{state.lower()}: {cause}"
    return f"in Ray state {state}"


def load_average() -> str:
    """The node's 1-minute load average against its cores, e.g. '42.0 on 2 cores'."""
    return f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
