"""What runs on a loop host: tenants, their context, and how their runs end.

A tenant is a small picklable object with ``async run(ctx)``; many run on one host's event
loop. ``ctx`` gives it the host's shared resources, a thread pool for blocking work, and the
harness instance the driver leased for it on an env host.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
from ray.exceptions import RayActorError, RayTaskError

from vlrl.harness import Action, ActionError, HarnessError, Observation, StepResult
from vlrl.harness.fork import EpisodeRecord
from vlrl.pool.remote_errors import EnvCallError, cause_of, describe
from vlrl.pool.screens import ShippedObservation, new_receiver
from vlrl.store import WriteLedger

T = TypeVar("T")

Status = Literal["ok", "failed", "timeout", "loop_host_died", "env_host_died", "rejected"]


class Tenant(Protocol):
    """``async run(ctx)``; a tenant whose class sets ``starts_program = True`` starts a program of
    the user's (an agent program) and holds one of the pool's program slots while it runs
    (``HarnessPool.Config.max_programs_per_host``, ``max_programs``)."""

    async def run(self, ctx: TenantContext) -> Any: ...


@dataclass(frozen=True, slots=True)
class TenantOutcome:
    """How one tenant run ended; ``error`` says why when it did not end ``ok``."""

    tenant_id: str
    status: Status
    value: Any = None
    error: str | None = None
    host: int | None = None
    lost_writers: tuple[str, ...] = ()
    """Runs of this tenant whose loop host died under them (or whose host's ``run`` raised): store
    writes they made could not be taken back by the host, so the caller that owns the store does
    it (``PayloadStore.take_back``)."""


def lost_writers(outcomes: list[TenantOutcome]) -> list[str]:
    """Every run of ``outcomes`` whose writes nobody took back (its loop host died)."""
    return [writer for outcome in outcomes for writer in outcome.lost_writers]


@dataclass(frozen=True, slots=True)
class EnvAssignment:
    """The env host the driver chose for one tenant (fewest leased instances in its pool)."""

    host: Any
    codebase: str
    """The harness codebase of the host's pool (errors name it)."""
    settings: dict[str, Any] = field(default_factory=dict)
    call_timeout_s: float | None = None
    """How long one harness call may run (the env hosts' ``tenant_timeout_s``); the caller times
    it, since the host runs the call on a thread that cannot be stopped. None: no bound."""


class EnvSession:
    """A tenant's harness instance on an env host: every call is one Ray call to that host, the
    instance opened by the first ``reset`` or ``replay`` in the same call. An action the harness
    refuses comes back as its ``ActionError`` (an invalid action, for the agent); any other error
    of the call, or a call past the assignment's ``call_timeout_s``, as an ``EnvCallError`` naming
    codebase, call and cause. Screens shipped as tiles are assembled here: a small one on the
    event loop, a large one on the host's threads (``pool.screens``)."""

    def __init__(
        self, assignment: EnvAssignment, instance_id: str, run_blocking: Callable[..., Any], *, opened: bool = True
    ) -> None:
        self._assignment = assignment
        self._run_blocking = run_blocking
        self._screens = new_receiver()
        self._named: tuple[np.ndarray, str] | None = None  # the last screen assembled, and its content hash
        self._unopened = not opened
        self.instance_id = instance_id

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict]:
        obs, info = await self._call("reset", seed, options, *self._open_settings())
        self._unopened = False
        return await self._observation(obs), info

    async def step(self, action: Action) -> StepResult:
        await self.open()
        obs, *rest = await self._call("step", action)
        return (await self._observation(obs), *rest)

    def content_hash(self, screenshot: np.ndarray) -> str | None:
        """The content hash of ``screenshot`` when it is the last screen this session assembled
        (the env host hashed it: no need to hash it again), else None. Assembled screens are
        read-only, so the name stays true."""
        if self._named is None or self._named[0] is not screenshot:
            return None
        return self._named[1]

    async def _observation(self, obs: Observation | ShippedObservation) -> Observation:
        if isinstance(obs, Observation):
            return obs
        assembled = await self._assemble(obs)
        if assembled is None:  # the receiver dropped tiles this screen needs: get it whole
            obs = await self._call("resend")
            assembled = await self._assemble(obs)
        self._named = (assembled.screenshot, obs.screen.key)
        return assembled

    async def _assemble(self, obs: ShippedObservation) -> Observation | None:
        if obs.inline:
            return obs.observation(self._screens)
        return await self._run_blocking(obs.observation, self._screens)

    async def replay(self, record: EpisodeRecord, turn: int) -> tuple[Observation, dict]:
        """Bring the instance to turn ``turn`` of ``record`` (``EnvHost.replay``): a divergence
        comes back as an ``EnvCallError`` naming the turn."""
        obs, info = await self._call("replay", record, turn, *self._open_settings())
        self._unopened = False
        return await self._observation(obs), info

    async def oracle(self) -> Action | None:
        await self.open()
        return await self._call("oracle")

    async def open(self) -> None:
        """Open the instance now, if no call has yet (``reset`` and ``replay`` open it themselves)."""
        if self._unopened:
            await self._call("open", self._assignment.settings)
            self._unopened = False

    async def release(self) -> None:
        if not self._unopened:
            await self._call("release")

    def _open_settings(self) -> tuple[dict[str, Any], ...]:
        return (self._assignment.settings,) if self._unopened else ()

    async def _call(self, method: str, *args: Any) -> Any:
        assignment = self._assignment
        opening = self._unopened and method in ("reset", "replay")
        call = _call(assignment.host, assignment.codebase, method, self.instance_id, *args, label="open()+" * opening)
        if assignment.call_timeout_s is None or method == "release":
            return await call
        try:
            return await asyncio.wait_for(call, assignment.call_timeout_s)
        except asyncio.TimeoutError:  # the host finds the call still running at release: the instance is broken
            limit = HarnessError(f"the harness call ran longer than {assignment.call_timeout_s:g} s")
            raise EnvCallError(assignment.codebase, f"{'open()+' * opening}{method}()", limit) from None


async def _call(host: Any, codebase: str, method: str, *args: Any, label: str = "") -> Any:
    """``host.method(*args)``; an error names the call, after ``label`` (what else it did: a first
    ``reset`` that opened the instance is ``open()+reset()``)."""
    try:
        return await getattr(host, method).remote(*args)
    except RayTaskError as error:
        cause = cause_of(error)
        if isinstance(cause, ActionError):
            raise cause from None
        raise EnvCallError(codebase, f"{label}{method}()", error) from None


class TenantContext:
    """Per-tenant view of its host; cleanups run when the tenant ends, however it ends."""

    def __init__(
        self,
        tenant_id: str,
        shared: dict[str, Any],
        run_blocking: Callable[..., Any],
        env: EnvAssignment | None,
    ) -> None:
        self.tenant_id = tenant_id
        self.shared = shared
        self._run_blocking = run_blocking
        self._env = env
        self._sessions: list[EnvSession] = []
        self.writes = WriteLedger(f"tenant {tenant_id}", writer=tenant_id)
        """Store writes of this tenant's result: the host takes them back if it discards the result
        (a timeout or failure), even when the tenant's thread finishes writing later."""

    async def to_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking work on the host's threads, never on its event loop."""
        return await self._run_blocking(fn, *args)

    async def open_env(self) -> EnvSession:
        """A harness instance on the env host the driver assigned: opened (or a warm one reused)
        by the session's first call, so an episode's open costs no call of its own."""
        if self._env is None:
            raise RuntimeError(f"tenant {self.tenant_id}: no env host was assigned to it")
        session = EnvSession(self._env, f"{self.tenant_id}/{len(self._sessions)}", self._run_blocking, opened=False)
        self._sessions.append(session)
        return session

    async def fork_env(self, session: EnvSession) -> EnvSession | None:
        """A new harness instance forked from ``session``'s (the same state, on the same env host),
        or None when its harness does not fork (open one and replay instead)."""
        instance_id = f"{self.tenant_id}/{len(self._sessions)}"
        await session.open()
        if not await _call(self._env.host, self._env.codebase, "fork", session.instance_id, instance_id):
            return None
        twin = EnvSession(self._env, instance_id, self._run_blocking)
        self._sessions.append(twin)
        return twin

    async def close(self) -> list[str]:
        """Release every instance this tenant opened, best effort; returns what went wrong. It
        never raises: a release can fail (a broken instance whose close times out on the thread
        still stuck in its last call), and the host must still take back the tenant's writes and
        report how it ended."""
        problems = []
        for session in self._sessions:
            try:
                await asyncio.shield(session.release())
            except RayActorError:  # a dead env host has nothing left to release
                pass
            except Exception as error:
                problems.append(f"releasing harness instance {session.instance_id} failed: {describe(error)}")
        return problems
