"""Env host: one process that imports one harness codebase and hosts many harness instances.

Harness calls block (rendering, browsers), so each runs on a thread: a shared pool, or a
dedicated thread per instance for harnesses whose objects are bound to the thread that made
them (sync Playwright). Instances are leased per episode and kept warm for the next lease with
the same settings, so a browser is launched once, not once per episode. A harness call that
raises reaches the caller as that exception; the host and the other instances go on. An action
the harness refuses (``ActionError``) is ordinary play; any other failure of ``reset``, ``step``
or ``oracle`` (a crash, a timeout) leaves the instance in an unknown state, so it is closed at
release and the next lease gets a fresh one. A branching rollout's branch gets its instance to a
turn of an earlier episode by ``replay``, or as a ``fork`` of a sibling's where the harness forks. With ``screen_tile_px`` set, observations go back as
the tiles the lease's loop lacks (``pool.screens``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from vlrl.harness import Action, ActionError, Harness, HarnessError, Observation, StepResult
from vlrl.harness.fork import EpisodeRecord, forks, replay
from vlrl.mm.tile_wire import TileSender
from vlrl.pool.host_config import HostConfig
from vlrl.pool.screens import ShippedObservation


class HostFullError(RuntimeError):
    """The host already runs ``max_tenants`` instances; the pool should have queued the lease."""


@dataclass(slots=True)
class _Instance:
    harness: Harness
    executor: ThreadPoolExecutor
    settings_key: str
    dedicated: bool
    broken: bool = False


class EnvHost:
    def __init__(
        self, index: int, factory: Callable[..., Harness], config: HostConfig, screen_tile_px: int | None = None
    ) -> None:
        self._index = index
        self._tile_px = screen_tile_px
        self._senders: dict[str, TileSender] = {}  # per lease: what its loop holds of the screens
        self._screens: dict[str, Observation] = {}  # per lease: the latest observation, for a resend
        self._factory = factory
        self._config = config
        self._thread_bound = bool(getattr(factory, "thread_bound", False))
        self._threads = ThreadPoolExecutor(config.threads, thread_name_prefix=f"env-host-{index}")
        self._leased: dict[str, _Instance] = {}
        self._idle: dict[str, list[_Instance]] = defaultdict(list)

    async def open(self, instance_id: str, settings: dict[str, Any]) -> None:
        if instance_id in self._leased:
            raise HarnessError(f"harness instance {instance_id!r} is already open on env host {self._index}")
        key = json.dumps(settings, sort_keys=True, default=str)
        if self._tile_px:
            self._senders[instance_id] = TileSender(self._tile_px)
        if self._idle[key]:
            self._leased[instance_id] = self._idle[key].pop()
            return
        if len(self._leased) + self._idle_count() >= self._config.max_tenants:
            if not await self._close_one_idle():
                raise HostFullError(f"env host {self._index} holds {self._config.max_tenants} instances already")
        executor = (
            ThreadPoolExecutor(1, thread_name_prefix=f"env-{instance_id}") if self._thread_bound else self._threads
        )
        harness = await self._call(executor, lambda: self._factory(**settings))
        self._leased[instance_id] = _Instance(harness, executor, key, dedicated=self._thread_bound)

    async def reset(self, instance_id: str, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        """``(observation, info)``; the observation shipped as tiles when the host ships tiles."""
        instance = self._instance(instance_id)

        def reset() -> tuple[Any, dict]:
            obs, info = instance.harness.reset(seed=seed, options=options)
            return self._shipped(instance_id, obs), info

        return await self._guarded(instance, reset)

    async def step(self, instance_id: str, action: Action) -> StepResult:
        instance = self._instance(instance_id)

        def step() -> StepResult:
            obs, *rest = instance.harness.step(action)
            return (self._shipped(instance_id, obs), *rest)

        return await self._guarded(instance, step)

    async def replay(self, instance_id: str, record: EpisodeRecord, turn: int) -> tuple[Any, dict]:
        """Bring the instance to turn ``turn`` of ``record`` (``vlrl.harness.fork.replay``, every
        screen checked): ``(observation, info)`` there, as ``reset`` returns them. A divergence
        raises ``ReplayDivergence`` and the instance is closed at release, like any failed call."""
        instance = self._instance(instance_id)

        def replayed() -> tuple[Any, dict]:
            obs, info = replay(instance.harness, record, turn)
            return self._shipped(instance_id, obs), info

        return await self._guarded(instance, replayed)

    async def fork(self, instance_id: str, twin_id: str) -> bool:
        """Open ``twin_id`` as a fork of the instance (``Harness.fork``): the same state, screen for
        screen; False, opening nothing, when the harness does not fork (the caller replays) or is
        bound to its thread (a copy made there could not be used from another)."""
        instance = self._instance(instance_id)
        if not forks(instance.harness) or instance.dedicated:
            return False
        if twin_id in self._leased:
            raise HarnessError(f"harness instance {twin_id!r} is already open on env host {self._index}")
        twin = await self._guarded(instance, instance.harness.fork)
        self._leased[twin_id] = _Instance(twin, instance.executor, instance.settings_key, dedicated=False)
        if self._tile_px:
            self._senders[twin_id] = TileSender(self._tile_px)
        if instance_id in self._screens:
            self._screens[twin_id] = self._screens[instance_id]
        return True

    async def resend(self, instance_id: str) -> ShippedObservation:
        """The latest observation again, whole: the lease's loop could not assemble it."""
        instance = self._instance(instance_id)
        sender = self._senders[instance_id]
        sender.reset()
        return await self._call(instance.executor, lambda: ShippedObservation.of(self._screens[instance_id], sender))

    async def oracle(self, instance_id: str) -> Action | None:
        instance = self._instance(instance_id)
        return await self._guarded(instance, instance.harness.oracle)

    async def release(self, instance_id: str) -> None:
        """End a lease; a healthy instance stays warm for the next lease with the same settings."""
        instance = self._leased.pop(instance_id, None)
        self._senders.pop(instance_id, None)
        self._screens.pop(instance_id, None)
        if instance is None:
            return
        if instance.broken:
            await self._close(instance)
        else:
            self._idle[instance.settings_key].append(instance)

    async def release_tenant(self, tenant_id: str) -> None:
        """End every lease of one tenant run (its loop host died before it could release them)."""
        for instance_id in [i for i in self._leased if i.startswith(f"{tenant_id}/")]:
            await self.release(instance_id)

    async def in_flight(self) -> int:
        return len(self._leased)

    async def instances(self) -> int:
        return len(self._leased) + self._idle_count()

    async def pid(self) -> int:
        return os.getpid()

    async def node_id(self) -> str:
        """The Ray node this host runs on (where a pool's hosts landed on a cluster)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    async def shutdown(self) -> None:
        """Close every instance, leased or idle (no orphan browser processes)."""
        everything = list(self._leased.values()) + [i for idle in self._idle.values() for i in idle]
        self._leased.clear()
        self._senders.clear()
        self._screens.clear()
        self._idle.clear()
        await asyncio.gather(*(self._close(i) for i in everything))
        self._threads.shutdown(wait=False)

    def _instance(self, instance_id: str) -> _Instance:
        try:
            return self._leased[instance_id]
        except KeyError:
            raise HarnessError(f"harness instance {instance_id!r} is not open on env host {self._index}") from None

    def _shipped(self, instance_id: str, obs: Observation) -> Observation | ShippedObservation:
        sender = self._senders.get(instance_id)
        if sender is None:
            return obs
        self._screens[instance_id] = obs
        return ShippedObservation.of(obs, sender)

    async def _guarded(self, instance: _Instance, fn: Callable[[], Any]) -> Any:
        """Run one harness call; an instance whose call failed other than by refusing an action
        is never leased again."""
        try:
            return await self._call(instance.executor, fn)
        except ActionError:
            raise
        except asyncio.TimeoutError:
            instance.broken = True
            raise HarnessError(
                f"harness call on env host {self._index} ran longer than {self._config.tenant_timeout_s:g} s"
            ) from None
        except BaseException:  # a crash, or a cancelled call still running on its thread
            instance.broken = True
            raise

    async def _call(self, executor: ThreadPoolExecutor, fn: Callable[[], Any]) -> Any:
        if not self._config.blocking_on_threads:
            return fn()  # stalls every tenant of this host while it runs
        future = asyncio.get_running_loop().run_in_executor(executor, fn)
        return await asyncio.wait_for(future, self._config.tenant_timeout_s)

    async def _close(self, instance: _Instance) -> None:
        try:
            await self._call(instance.executor, instance.harness.close)
        except asyncio.TimeoutError:
            raise HarnessError(
                f"closing a harness instance on env host {self._index} ran longer than"
                f" {self._config.tenant_timeout_s:g} s (its thread may still be stuck in an earlier call);"
                " the instance is abandoned"
            ) from None
        finally:
            if instance.dedicated:
                instance.executor.shutdown(wait=False)

    async def _close_one_idle(self) -> bool:
        for idle in self._idle.values():
            if idle:
                await self._close(idle.pop())
                return True
        return False

    def _idle_count(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

