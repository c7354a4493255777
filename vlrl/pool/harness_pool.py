"""The Harness Pool: a loop pool and one env pool per harness codebase, sized by budget shares.

``run(tenant, codebase=...)`` places a tenant on the loop host with the fewest tenants in flight
and leases it a harness instance on the env host of that codebase with the fewest leased
instances. A tenant whose host dies is resubmitted (bounded attempts) on a fresh host; a tenant
that fails by itself is reported, not retried. The book counts every run, so no trajectory is
lost silently, and the outcome names the runs whose loop host died or whose host's ``run`` raised
past its own handling (``lost_writers``), so that whoever owns the store takes back what they
wrote. No error of a run, or of releasing its harness instances, leaves ``run`` unrecorded.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any

import ray
from ray.exceptions import RayActorError

from vlrl.config import Ge, Gt
from vlrl.harness import resolve
from vlrl.pool.budget import LOOP_POOL, HostBudget
from vlrl.pool.env_host import EnvHost
from vlrl.pool.host_config import HostConfig
from vlrl.pool.host_pool import HostLease, HostPool
from vlrl.pool.host_startup import StartingHost, wait_started
from vlrl.pool.loop_host import LoopHost
from vlrl.pool.remote_errors import describe
from vlrl.pool.tenant import EnvAssignment, Tenant, TenantOutcome


@dataclass(slots=True)
class RunBook:
    """Every tenant run, counted once: ``submitted == ok + failed + timeout + in_flight`` always."""

    submitted: int = 0
    in_flight: int = 0
    ok: int = 0
    failed: int = 0
    timeout: int = 0
    resubmitted: int = 0
    loop_host_deaths: int = 0
    env_host_deaths: int = 0
    errors: list[str] = field(default_factory=list)

    def balanced(self) -> bool:
        return self.submitted == self.ok + self.failed + self.timeout + self.in_flight

    def record(self, outcome: TenantOutcome) -> None:
        if outcome.status == "ok":
            self.ok += 1
        elif outcome.status == "timeout":
            self.timeout += 1
        else:
            self.failed += 1
        if outcome.error:
            self.errors.append(f"{outcome.tenant_id}: {outcome.error.splitlines()[0]}")


class HarnessPool:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Host actors for Agent Loops and harness instances, split by budget shares."""

        budget: HostBudget = field(default_factory=HostBudget)
        """How many hosts in all, and each pool's share ('loop' plus one entry per harness codebase)."""

        loop_host: HostConfig = field(default_factory=HostConfig)
        """Limits of every loop host."""

        env_host: HostConfig = field(default_factory=lambda: HostConfig(max_tenants=64))
        """Limits of every env host (max_tenants counts leased and warm instances)."""

        screen_tile_px: Annotated[int, Ge(8)] | None = 64
        """Screenshots travel from env host to loop host as the tiles of this side the loop lacks
        (a step that changes a few tiles costs a few kilobytes); None sends whole screenshots."""

        max_attempts: Annotated[int, Ge(1)] = 3
        """Runs of one tenant when its host dies under it; a tenant's own failure is never retried."""

        startup_timeout_s: Annotated[float, Gt(0)] = 300.0
        """Seconds for every host to start (and import its codebase) before start-up fails, naming
        each late host and what Ray knows of it; hosts still starting are logged every 15 s. On an
        idle 2-core machine hosts start in seconds; at load average 80 the main job's took over 120 s."""

        max_programs_per_host: Annotated[int, Ge(1)] | None = None
        """Agent programs (``DataSource.external``) one loop host runs at once, in training and
        evaluation alike; the rest wait in the driver, their time limits not yet running (None:
        twice the CPUs of the host's node: a program mostly waits on the policy, and two a core
        keep the cores busy without a queue of runnable processes far beyond them)."""

        max_programs: Annotated[int, Ge(1)] | None = None
        """Agent programs the whole run runs at once, over every loop host (None: no bound beyond
        ``max_programs_per_host``)."""

        def build(self, *, loop_setup: Callable[[], dict[str, Any]] | None = None) -> HarnessPool:
            return HarnessPool(self, loop_setup=loop_setup)

    def __init__(self, config: HarnessPool.Config, *, loop_setup: Callable[[], dict[str, Any]] | None = None) -> None:
        self.config = config
        run = uuid.uuid4().hex[:6]
        sizes = config.budget.sizes()
        self.loop = HostPool(
            f"{run}/{LOOP_POOL}",
            sizes[LOOP_POOL],
            config.loop_host.max_tenants,
            lambda i, name: config.loop_host.start(LoopHost, name, i, config.loop_host, loop_setup),
        )
        self.envs: dict[str, HostPool] = {}
        for codebase, size in sizes.items():
            if codebase == LOOP_POOL:
                continue
            factory = resolve(codebase)  # one codebase per pool, checked before any host starts
            self.envs[codebase] = HostPool(
                f"{run}/env-{codebase}",
                size,
                config.env_host.max_tenants,
                lambda i, name, f=factory: config.env_host.start(
                    EnvHost, name, i, f, config.env_host, config.screen_tile_px
                ),
            )
        self.book = RunBook()
        self._wait_ready(config.startup_timeout_s)
        per_host = config.max_programs_per_host
        cpus = [per_host] * self.loop.size if per_host else ray.get([h.cpus.remote() for h in self.loop.hosts()])
        self.loop.bound_programs([per_host or 2 * n for n in cpus], config.max_programs)

    def sizes(self) -> dict[str, int]:
        return {LOOP_POOL: self.loop.size, **{name: pool.size for name, pool in self.envs.items()}}

    def placement(self) -> dict[str, list[str]]:
        """Per pool, the Ray node of each host slot, in slot order."""
        import ray

        pools = {LOOP_POOL: self.loop, **self.envs}
        return {name: ray.get([host.node_id.remote() for host in pool.hosts()]) for name, pool in pools.items()}

    async def run(
        self,
        tenant: Tenant,
        *,
        codebase: str | None = None,
        env_settings: dict[str, Any] | None = None,
        tenant_id: str | None = None,
    ) -> TenantOutcome:
        """Run one tenant to its end, resubmitting it when a host dies under it."""
        if codebase is not None and codebase not in self.envs:
            raise KeyError(f"no env pool for harness codebase {codebase!r}; pools: {sorted(self.envs)}")
        tenant_id = tenant_id or uuid.uuid4().hex[:12]
        self.book.submitted += 1
        self.book.in_flight += 1
        reasons: list[str] = []
        lost: list[str] = []  # runs whose loop host died: their writes are the caller's to take back
        try:
            for attempt in range(1, self.config.max_attempts + 1):
                run_id = f"{tenant_id}.{attempt}"
                outcome = await self._attempt(tenant, run_id, codebase, env_settings or {})
                if outcome.status in ("ok", "failed", "timeout"):
                    lost.extend(outcome.lost_writers)
                    outcome = TenantOutcome(
                        tenant_id, outcome.status, outcome.value, outcome.error, outcome.host, tuple(lost)
                    )
                    break
                if outcome.status == "loop_host_died":
                    lost.append(run_id)
                reasons.append(f"attempt {attempt}: {outcome.status} ({outcome.error})")
                if attempt < self.config.max_attempts:
                    self.book.resubmitted += 1
            else:
                outcome = TenantOutcome(
                    tenant_id,
                    "failed",
                    error=f"gave up after {self.config.max_attempts} attempts: " + "; ".join(reasons),
                    lost_writers=tuple(lost),
                )
            self.book.record(outcome)
            return outcome
        finally:
            self.book.in_flight -= 1

    async def run_many(self, jobs: Iterable[tuple[Tenant, dict[str, Any]]]) -> list[TenantOutcome]:
        """Run ``(tenant, run-kwargs)`` jobs concurrently; outcomes come back in job order."""
        return await asyncio.gather(*(self.run(tenant, **kwargs) for tenant, kwargs in jobs))

    def _wait_ready(self, timeout_s: float) -> None:
        """Block until every host answers, so that start-up errors (a codebase that fails to
        import, too few resources) surface here and placement starts from idle hosts."""
        pools = [self.loop, *self.envs.values()]
        hosts = [StartingHost(pool.name, name, handle) for pool in pools for name, handle in pool.named_hosts()]
        try:
            wait_started(hosts, timeout_s)
        except BaseException:
            self.shutdown()
            raise

    def shutdown(self) -> None:
        """Close every harness instance on every env host, then end all hosts."""
        for pool in self.envs.values():
            pool.shutdown(close=lambda host: host.shutdown.remote())
        self.loop.shutdown()

    async def _attempt(
        self, tenant: Tenant, run_id: str, codebase: str | None, settings: dict[str, Any]
    ) -> TenantOutcome:
        loop_lease = await self.loop.acquire(program=bool(getattr(tenant, "starts_program", False)))
        env_pool = self.envs[codebase] if codebase is not None else None
        env_lease: HostLease | None = await env_pool.acquire() if env_pool is not None else None
        try:
            assignment = (
                EnvAssignment(env_lease.host, codebase, settings, self.config.env_host.tenant_timeout_s)
                if env_lease is not None
                else None
            )
            outcome = await loop_lease.host.run.remote(run_id, tenant, assignment)
        except RayActorError as error:
            if await self.loop.replace_dead(loop_lease):
                self.book.loop_host_deaths += 1
            note = await _release_quietly(env_lease, run_id) if env_lease is not None else ""
            return TenantOutcome(run_id, "loop_host_died", error=type(error).__name__ + note)
        except Exception as error:  # the host's run raised past its own handling: a failed run, not a lost one
            note = await _release_quietly(env_lease, run_id) if env_lease is not None else ""
            error_text = f"loop host's run raised {describe(error)}{note}"
            # its writes were not taken back on the host: the caller that owns the store does it
            return TenantOutcome(run_id, "failed", error=error_text, lost_writers=(run_id,))
        finally:
            await self.loop.release(loop_lease)
            if env_pool is not None and env_lease is not None:
                await env_pool.release(env_lease)
        if outcome.status == "env_host_died" and env_pool is not None and env_lease is not None:
            if await env_pool.replace_dead(env_lease):
                self.book.env_host_deaths += 1
        return outcome


async def _release_quietly(lease: HostLease, run_id: str) -> str:
    """End a run's leases on its env host; never raises. Returns a note for the run's error when
    the release failed (e.g. closing a broken instance timed out), else ''."""
    try:
        await lease.host.release_tenant.remote(run_id)
    except RayActorError:  # the env host died too; it holds nothing any more
        pass
    except Exception as error:
        return f"; releasing its harness instances failed: {describe(error)}"
    return ""
