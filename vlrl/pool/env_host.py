"""Env host: one process that imports one harness codebase and hosts many harness instances.

Harness calls block (rendering, browsers), so the host is a threaded Ray actor: Ray runs each
call on one of its own threads (``HostConfig.max_concurrency`` of them) and the harness call
runs right there, with no event loop to hand it to and back from: a step costs one Ray call and
nothing more. At most ``HostConfig.threads`` harness calls run at once; a harness whose objects
are bound to the thread that made them (sync Playwright) gets a dedicated thread per instance,
and its calls wait on it. Instances are leased per episode and kept warm for the next lease
with the same settings, so a browser is launched once, not once per episode; the first
``reset`` (or ``replay``) of a lease may open it in the same call (``open_settings``). A
harness call that raises reaches the caller as that exception; the host and the other
instances go on. An action the harness refuses (``ActionError``) is ordinary play; any other
failure of ``reset``, ``step`` or ``oracle`` (a crash), or a call its caller stopped waiting
for (``tenant_timeout_s``, timed by the caller: a thread cannot be stopped), leaves the
instance in an unknown state, so it is closed at release, or when that call ends, and the next
lease gets a fresh one. A branching rollout's branch gets its instance to a turn of an earlier
episode by ``replay``, or as a ``fork`` of a sibling's where the harness forks. With
``screen_tile_px`` set, observations go back as the tiles the lease's loop lacks
(``pool.screens``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import ray

from vlrl.harness import Action, ActionError, Harness, HarnessError, Observation, StepResult
from vlrl.harness.fork import EpisodeRecord, forks, replay
from vlrl.mm.tile_wire import TileSender
from vlrl.pool.host_config import HostConfig
from vlrl.pool.screens import ShippedObservation

log = logging.getLogger(__name__)


class HostFullError(RuntimeError):
    """The host already runs ``max_tenants`` instances; the pool should have queued the lease."""


@dataclass(slots=True)
class _Instance:
    harness: Harness
    settings_key: str
    thread: ThreadPoolExecutor | None = None
    """The instance's own thread, for a harness bound to the thread that made it; None runs its
    calls on the thread that took them."""
    broken: bool = False
    calls: int = 0
    """Calls running on it now (one unless its caller gave up waiting on one)."""
    abandoned: bool = False
    """Released while a call still ran on it: that call closes it when it ends."""


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
        self._running = threading.BoundedSemaphore(config.threads if config.blocking_on_threads else 1)
        self._closer = ThreadPoolExecutor(config.threads, thread_name_prefix=f"env-host-{index}-close")
        self._lock = threading.Lock()  # guards the lease tables below, taken by concurrent calls
        self._leased: dict[str, _Instance] = {}
        self._idle: dict[str, list[_Instance]] = defaultdict(list)
        self._opening = 0

    def open(self, instance_id: str, settings: dict[str, Any]) -> None:
        key = json.dumps(settings, sort_keys=True, default=str)
        with self._lock:
            if instance_id in self._leased:
                raise HarnessError(f"harness instance {instance_id!r} is already open on env host {self._index}")
            if self._tile_px:
                self._senders[instance_id] = TileSender(self._tile_px)
            if self._idle[key]:
                self._leased[instance_id] = self._idle[key].pop()
                return
            evicted = None
            if len(self._leased) + self._idle_count() + self._opening >= self._config.max_tenants:
                evicted = self._pop_idle()
                if evicted is None:
                    self._senders.pop(instance_id, None)
                    raise HostFullError(f"env host {self._index} holds {self._config.max_tenants} instances already")
            self._opening += 1
        try:
            if evicted is not None:
                self._close(evicted)
            thread = ThreadPoolExecutor(1, thread_name_prefix=f"env-{instance_id}") if self._thread_bound else None
            try:
                harness = self._on(thread, lambda: self._factory(**settings))
            except BaseException:
                if thread is not None:
                    thread.shutdown(wait=False)
                raise
        except BaseException:
            with self._lock:
                self._senders.pop(instance_id, None)
            raise
        finally:
            with self._lock:
                self._opening -= 1
        with self._lock:
            self._leased[instance_id] = _Instance(harness, key, thread)

    def reset(
        self,
        instance_id: str,
        seed: int | None,
        options: dict[str, Any] | None,
        open_settings: dict[str, Any] | None = None,
    ) -> tuple[Any, dict]:
        """``(observation, info)``; the observation shipped as tiles when the host ships tiles.
        ``open_settings``: open the instance with these settings first (one call, not two)."""
        if open_settings is not None:
            self.open(instance_id, open_settings)
        instance = self._instance(instance_id)

        def reset() -> tuple[Any, dict]:
            obs, info = instance.harness.reset(seed=seed, options=options)
            return self._shipped(instance_id, obs), info

        return self._guarded(instance, reset)

    @ray.method(enable_task_events=False)  # Ray's per-task records: 0.05-0.1 core-ms a step on the hosts
    def step(self, instance_id: str, action: Action) -> StepResult:
        instance = self._instance(instance_id)

        def step() -> StepResult:
            obs, *rest = instance.harness.step(action)
            return (self._shipped(instance_id, obs), *rest)

        return self._guarded(instance, step)

    def replay(
        self, instance_id: str, record: EpisodeRecord, turn: int, open_settings: dict[str, Any] | None = None
    ) -> tuple[Any, dict]:
        """Bring the instance to turn ``turn`` of ``record`` (``vlrl.harness.fork.replay``, every
        screen checked): ``(observation, info)`` there, as ``reset`` returns them. A divergence
        raises ``ReplayDivergence`` and the instance is closed at release, like any failed call."""
        if open_settings is not None:
            self.open(instance_id, open_settings)
        instance = self._instance(instance_id)

        def replayed() -> tuple[Any, dict]:
            obs, info = replay(instance.harness, record, turn)
            return self._shipped(instance_id, obs), info

        return self._guarded(instance, replayed)

    def fork(self, instance_id: str, twin_id: str) -> bool:
        """Open ``twin_id`` as a fork of the instance (``Harness.fork``): the same state, screen for
        screen; False, opening nothing, when the harness does not fork (the caller replays) or is
        bound to its thread (a copy made there could not be used from another)."""
        instance = self._instance(instance_id)
        if not forks(instance.harness) or instance.thread is not None:
            return False
        with self._lock:
            if twin_id in self._leased:
                raise HarnessError(f"harness instance {twin_id!r} is already open on env host {self._index}")
        twin = self._guarded(instance, instance.harness.fork)
        with self._lock:
            self._leased[twin_id] = _Instance(twin, instance.settings_key)
            if self._tile_px:
                self._senders[twin_id] = TileSender(self._tile_px)
            if instance_id in self._screens:
                self._screens[twin_id] = self._screens[instance_id]
        return True

    def resend(self, instance_id: str) -> ShippedObservation:
        """The latest observation again, whole: the lease's loop could not assemble it."""
        self._instance(instance_id)
        sender = self._senders[instance_id]
        sender.reset()
        return ShippedObservation.of(self._screens[instance_id], sender)

    def oracle(self, instance_id: str) -> Action | None:
        instance = self._instance(instance_id)
        return self._guarded(instance, instance.harness.oracle)

    def release(self, instance_id: str) -> None:
        """End a lease; a healthy instance stays warm for the next lease with the same settings.
        One with a call still running (its caller gave up waiting) is broken: its own thread's
        instance is closed behind that call, any other by the call when it ends."""
        with self._lock:
            instance = self._leased.pop(instance_id, None)
            self._senders.pop(instance_id, None)
            self._screens.pop(instance_id, None)
            if instance is None:
                return
            if instance.calls:
                instance.broken = True
                if instance.thread is None:
                    instance.abandoned = True
                    return
            if not instance.broken:
                self._idle[instance.settings_key].append(instance)
                return
        self._close(instance)

    def release_tenant(self, tenant_id: str) -> None:
        """End every lease of one tenant run (its loop host died before it could release them)."""
        with self._lock:
            mine = [i for i in self._leased if i.startswith(f"{tenant_id}/")]
        for instance_id in mine:
            self.release(instance_id)

    def in_flight(self) -> int:
        return len(self._leased)

    def instances(self) -> int:
        with self._lock:
            return len(self._leased) + self._idle_count()

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this host runs on (where a pool's hosts landed on a cluster)."""
        return ray.get_runtime_context().get_node_id()

    def shutdown(self) -> None:
        """Close every instance, leased or idle (no orphan browser processes); the first close
        that failed is raised once all were tried."""
        with self._lock:
            everything = list(self._leased.values()) + [i for idle in self._idle.values() for i in idle]
            self._leased.clear()
            self._senders.clear()
            self._screens.clear()
            self._idle.clear()
        with ThreadPoolExecutor(max(1, min(16, len(everything)))) as closing:  # not the closers they wait on
            errors = [e for e in closing.map(self._close_quietly, everything) if e is not None]
        self._closer.shutdown(wait=False)
        if errors:
            raise errors[0]

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

    def _guarded(self, instance: _Instance, fn: Callable[[], Any]) -> Any:
        """Run one harness call; an instance whose call failed other than by refusing an action
        is never leased again."""
        with self._lock:
            instance.calls += 1
        try:
            with self._running:
                return self._on(instance.thread, fn)
        except ActionError:
            raise
        except BaseException:  # a crash
            instance.broken = True
            raise
        finally:
            with self._lock:
                instance.calls -= 1
                close_now = instance.abandoned and not instance.calls
            if close_now:
                error = self._close_quietly(instance)
                if error is not None:
                    log.warning("env host %d: closing an abandoned harness instance failed: %s", self._index, error)

    @staticmethod
    def _on(thread: ThreadPoolExecutor | None, fn: Callable[[], Any]) -> Any:
        """``fn()`` on this thread, or on ``thread`` (waiting for it) when the instance has its own."""
        return fn() if thread is None else thread.submit(fn).result()

    def _close(self, instance: _Instance) -> None:
        """Close one instance within ``tenant_timeout_s``: on its own thread (behind any call still
        running there) or on the host's closing threads."""
        limit = self._config.tenant_timeout_s
        try:
            (instance.thread or self._closer).submit(instance.harness.close).result(timeout=limit)
        except FutureTimeout:
            raise HarnessError(
                f"closing a harness instance on env host {self._index} ran longer than {limit:g} s"
                " (its thread may still be stuck in an earlier call); the instance is abandoned"
            ) from None
        finally:
            if instance.thread is not None:
                instance.thread.shutdown(wait=False)

    def _close_quietly(self, instance: _Instance) -> BaseException | None:
        try:
            self._close(instance)
        except Exception as error:
            return error
        return None

    def _pop_idle(self) -> _Instance | None:
        for idle in self._idle.values():
            if idle:
                return idle.pop()
        return None

    def _idle_count(self) -> int:
        return sum(len(idle) for idle in self._idle.values())
