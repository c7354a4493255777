"""Loop host: one process, one event loop, many tenants (Agent Loops) sharing its resources.

The host builds its shared resources once (``setup``: e.g. the inference client and the one
tokenizer of the host) and hands them to every tenant. Blocking work goes to a bounded thread
pool. A tenant that raises or times out is reported in its ``TenantOutcome`` and cleaned up
(its store writes are taken back, ``TenantContext.writes``: nobody would own those keys); the
host and its other tenants go on.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ray.exceptions import RayActorError

from vlrl.pool.host_config import HostConfig
from vlrl.pool.tenant import EnvAssignment, Tenant, TenantContext, TenantOutcome


class LoopHost:
    def __init__(self, index: int, config: HostConfig, setup: Callable[[], dict[str, Any]] | None = None) -> None:
        self._index = index
        self._config = config
        self._threads = ThreadPoolExecutor(config.threads, thread_name_prefix=f"loop-host-{index}")
        self._shared = setup() if setup is not None else {}
        self._running: dict[str, asyncio.Task] = {}

    async def run(self, tenant_id: str, tenant: Tenant, env: EnvAssignment | None = None) -> TenantOutcome:
        if len(self._running) >= self._config.max_tenants:
            return TenantOutcome(tenant_id, "rejected", error="host is full", host=self._index)
        ctx = TenantContext(tenant_id, self._shared, self._run_blocking, env)
        task = asyncio.ensure_future(tenant.run(ctx))
        self._running[tenant_id] = task
        problems: list[str] = []
        try:
            value = await asyncio.wait_for(task, self._config.tenant_timeout_s)
            outcome = TenantOutcome(tenant_id, "ok", value=value, host=self._index)
        except asyncio.TimeoutError:
            limit = self._config.tenant_timeout_s
            outcome = TenantOutcome(tenant_id, "timeout", error=f"ran longer than {limit:g} s", host=self._index)
        except RayActorError as error:
            outcome = TenantOutcome(tenant_id, "env_host_died", error=_describe(error), host=self._index)
        except Exception as error:
            outcome = TenantOutcome(tenant_id, "failed", error=_describe(error, with_trace=True), host=self._index)
        finally:
            del self._running[tenant_id]
            problems = await ctx.close()  # never raises
        if problems:  # the trajectory stands; the failed release is reported with it
            note = "; ".join(problems)
            outcome = replace(outcome, error=f"{outcome.error}; {note}" if outcome.error else note)
        if outcome.status == "ok":
            return outcome
        return await self._take_back(ctx, outcome)

    async def in_flight(self) -> int:
        return len(self._running)

    async def pid(self) -> int:
        return os.getpid()

    async def cpus(self) -> int:
        """The CPUs this host's process may run on (its node's, less any affinity mask)."""
        return len(os.sched_getaffinity(0))

    async def node_id(self) -> str:
        """The Ray node this host runs on (where a pool's hosts landed on a cluster)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    async def _take_back(self, ctx: TenantContext, outcome: TenantOutcome) -> TenantOutcome:
        """Undo the store writes of a tenant whose result is discarded; a failed undo is reported."""
        try:
            await self._run_blocking(ctx.writes.take_back)
        except Exception as error:
            note = f"; taking back its store writes failed: {_describe(error)}"
            return TenantOutcome(outcome.tenant_id, outcome.status, error=f"{outcome.error}{note}", host=self._index)
        return outcome

    async def _run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)


def _describe(error: BaseException, *, with_trace: bool = False) -> str:
    text = f"{type(error).__name__}: {error}"
    if with_trace:
        text += "\n" + "".join(traceback.format_exception(error)[-6:])
    return text

