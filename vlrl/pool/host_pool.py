"""A fixed-size pool of host actors and the pool-wide view used to place tenants.

Hosts are created once at start-up; the number of actors never depends on batch size or
concurrency. A new tenant goes to the live host with the fewest tenants in flight; when every
host is at its limit the caller waits (back-pressure) instead of overloading a host. A host that
dies is replaced in its slot by a fresh actor; leases on the dead one are ignored when released.

A tenant that starts a program of the user's (an agent program, ``Tenant.starts_program``) also
takes a program slot: at most ``program_caps[i]`` on host ``i`` and ``max_programs`` in the whole
pool run at once (``bound_programs``); the others wait here, before any host's clock starts on
them, so a queue of programs never times out on its host.
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
    program: bool = False
    """Whether the claim holds a program slot too."""


@dataclass(slots=True)
class _Slot:
    host: Any
    generation: int = 0
    in_flight: int = 0
    programs: int = 0


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
        self.program_caps: list[int] | None = None
        """Programs each host slot may run at once (None: unbounded)."""
        self.max_programs: int | None = None
        """Programs the whole pool may run at once (None: the sum of ``program_caps``)."""
        self.programs = 0
        """Programs running now, counted from their leases (a dead host's too, until released)."""

    @property
    def size(self) -> int:
        return len(self._slots)

    def hosts(self) -> list[Any]:
        return [slot.host for slot in self._slots]

    def named_hosts(self) -> list[tuple[str, Any]]:
        """Each slot's host with its actor name."""
        return [(self._host_name(i, slot.generation), slot.host) for i, slot in enumerate(self._slots)]

    def in_flight(self) -> list[int]:
        return [slot.in_flight for slot in self._slots]

    def bound_programs(self, caps: list[int], max_programs: int | None = None) -> None:
        """Bound the programs tenants start: ``caps[i]`` at once on host ``i``, ``max_programs`` in all."""
        if len(caps) != self.size or min(caps) < 1:
            raise ValueError(f"pool {self.name!r}: program caps {caps}; expected {self.size} caps of at least 1")
        self.program_caps, self.max_programs = list(caps), max_programs

    async def acquire(self, *, program: bool = False) -> HostLease:
        """Claim a slot on the least-loaded host, waiting while every host is full (for a tenant
        that starts a ``program``: while no host has a program slot free, or the pool has none)."""
        changed = self._condition()
        async with changed:
            while True:
                index = self._choose(program)
                if index is not None:
                    slot = self._slots[index]
                    slot.in_flight += 1
                    bounded = program and self.program_caps is not None
                    if bounded:
                        slot.programs += 1
                        self.programs += 1
                    return HostLease(self.name, index, slot.generation, slot.host, program=bounded)
                await changed.wait()

    def _choose(self, program: bool) -> int | None:
        """The host with the fewest tenants in flight among those that can take one more."""
        free = [i for i in range(self.size) if self._slots[i].in_flight < self.capacity]
        caps = self.program_caps
        if program and caps is not None:
            if self.max_programs is not None and self.programs >= self.max_programs:
                return None
            free = [i for i in free if self._slots[i].programs < caps[i]]
        return min(free, key=lambda i: self._slots[i].in_flight, default=None)

    async def release(self, lease: HostLease) -> None:
        changed = self._condition()
        async with changed:
            slot = self._slots[lease.index]
            if slot.generation == lease.generation:
                slot.in_flight -= 1
                slot.programs -= lease.program
            self.programs -= lease.program
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
