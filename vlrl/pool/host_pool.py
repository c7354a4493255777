"""A fixed-size pool of host actors and the pool-wide view used to place tenants.

Hosts are created once at start-up; the number of actors never depends on batch size or
concurrency. A new tenant goes to the live host with the fewest tenants in flight; when every
host is at its limit the caller waits (back-pressure) instead of overloading a host. A host that
dies is replaced in its slot by a fresh actor; leases on the dead one are ignored when released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray


@dataclass(frozen=True, slots=True)
class HostLease:
    """A claim on one tenant slot of one host."""

    pool: str
    index: int
    generation: int
    host: Any


@dataclass(slots=True)
class _Slot:
    host: Any
    generation: int = 0
    in_flight: int = 0


class HostPool:
    def __init__(self, name: str, size: int, capacity: int, start_host: Callable[[int, str], Any]) -> None:
        if size < 1:
            raise ValueError(f"pool {name!r}: size={size}; expected at least one host")
        self.name = name
        self.capacity = capacity
        self._start_host = start_host
        self._slots = [_Slot(start_host(i, self._host_name(i, 0))) for i in range(size)]
        self._changed: asyncio.Condition | None = None
        self.host_deaths = 0

    @property
    def size(self) -> int:
        return len(self._slots)

    def hosts(self) -> list[Any]:
        return [slot.host for slot in self._slots]

    def in_flight(self) -> list[int]:
        return [slot.in_flight for slot in self._slots]

    async def acquire(self) -> HostLease:
        """Claim a slot on the least-loaded host, waiting while every host is full."""
        changed = self._condition()
        async with changed:
            while True:
                index = min(range(self.size), key=lambda i: self._slots[i].in_flight)
                slot = self._slots[index]
                if slot.in_flight < self.capacity:
                    slot.in_flight += 1
                    return HostLease(self.name, index, slot.generation, slot.host)
                await changed.wait()

    async def release(self, lease: HostLease) -> None:
        changed = self._condition()
        async with changed:
            slot = self._slots[lease.index]
            if slot.generation == lease.generation:
                slot.in_flight -= 1
            changed.notify_all()

    async def replace_dead(self, lease: HostLease) -> bool:
        """Replace the host behind ``lease`` if it is still the one in its slot; True if replaced."""
        changed = self._condition()
        async with changed:
            slot = self._slots[lease.index]
            if slot.generation != lease.generation:
                return False  # another caller saw the same death first
            ray.kill(slot.host, no_restart=True)
            generation = slot.generation + 1
            self._slots[lease.index] = _Slot(self._start_host(lease.index, self._host_name(lease.index, generation)), generation)
            self.host_deaths += 1
            changed.notify_all()
            return True

    def shutdown(self, close: Callable[[Any], Any] | None = None, timeout_s: float = 60.0) -> None:
        """Ask every host to close what it holds (``close(host) -> ref``), then end them."""
        if close is not None:
            refs = [close(slot.host) for slot in self._slots]
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for slot in self._slots:
            ray.kill(slot.host, no_restart=True)

    def _host_name(self, index: int, generation: int) -> str:
        return f"{self.name}/host-{index}.{generation}"

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed
