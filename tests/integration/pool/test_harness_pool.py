"""The Harness Pool on a real Ray cluster: many tenants per host, least-in-flight placement,
faults with exact accounting, budget shares and separate pools per codebase."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from vlrl.harness import register
from vlrl.pool import HarnessPool, HostBudget, HostConfig, ScriptedEpisode, TenantContext

register("light", "tests.helpers.light_harness:LightHarness")
register("light-other", "tests.helpers.light_harness:OtherLightHarness")


def _pool(total=4, shares=None, loop=None, env=None, attempts=3) -> HarnessPool:
    return HarnessPool.Config(
        budget=HostBudget(total_hosts=total, shares=shares or {"loop": 1, "light": 1}),
        loop_host=loop or HostConfig(max_tenants=512),
        env_host=env or HostConfig(max_tenants=512, threads=16),
        max_attempts=attempts,
    ).build()


@dataclass(frozen=True)
class Sleeper:
    """A tenant that only waits, then answers with its host's pid."""

    seconds: float
    fail: bool = False

    async def run(self, ctx: TenantContext) -> int:
        await asyncio.sleep(self.seconds)
        if self.fail:
            raise ValueError("tenant asked to fail")
        return await ctx.to_thread(os.getpid)


class Barrier:
    """A Ray actor: ``arrive`` returns once ``parties`` callers have arrived (all at once)."""

    def __init__(self, parties: int) -> None:
        self.parties, self.arrived, self.opened = parties, 0, asyncio.Event()

    async def arrive(self) -> int:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.opened.set()
        await self.opened.wait()
        return self.arrived


@dataclass(frozen=True)
class TogetherEpisode:
    """A scripted episode that starts only once ``barrier``'s parties are all in flight."""

    barrier: Any
    episode: ScriptedEpisode

    async def run(self, ctx: TenantContext) -> Any:
        await self.barrier.arrive.remote()
        return await self.episode.run(ctx)


@dataclass(frozen=True)
class ProgramSleeper:
    """A tenant that says it starts a program of the user's (as ``ExternalRun`` does), and returns
    when it held its slot (monotonic clock: one clock for every process of the machine)."""

    starts_program = True
    seconds: float

    async def run(self, ctx: TenantContext) -> tuple[float, float]:
        started = time.monotonic()
        await asyncio.sleep(self.seconds)
        return started, time.monotonic()


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    return max(sum(1 for a, b in spans if a <= start < b) for start, _ in spans)


def test_agent_programs_run_at_most_the_bound_at_once_and_the_default_fits_the_machine(ray_session):
    # Issue 52: evaluation started all 64 episodes' programs together on 2 cores.
    budget = HostBudget(total_hosts=2, shares={"loop": 1})
    pool = HarnessPool.Config(budget=budget).build()
    try:
        assert pool.loop.program_caps == [2 * len(os.sched_getaffinity(0))] * 2 and pool.loop.max_programs is None
    finally:
        pool.shutdown()
    pool = HarnessPool.Config(budget=budget, max_programs_per_host=2, max_programs=3).build()
    try:
        outcomes = asyncio.run(pool.run_many([(ProgramSleeper(1.0), {})] * 9 + [(Sleeper(0.1), {})] * 3))
        assert [o.status for o in outcomes] == ["ok"] * 12
        programs = [o.value for o in outcomes[:9]]
        by_host = {h: [o.value for o in outcomes[:9] if o.host == h] for h in (0, 1)}
        assert _most_at_once(programs) == 3 and max(_most_at_once(spans) for spans in by_host.values() if spans) <= 2
        assert pool.loop.programs == 0
    finally:
        pool.shutdown()


def test_over_500_concurrent_tenants_on_four_hosts(ray_session):
    ray = ray_session
    pool = _pool(env=HostConfig(max_tenants=512, threads=32))
    # 500 tenants wait for each other inside their runs: all 500 are in flight at once, however
    # fast or slow the machine submits them (a sampled peak could miss that moment).
    barrier = ray.remote(Barrier).options(max_concurrency=1000).remote(500)
    try:
        jobs = [
            (TogetherEpisode(barrier, ScriptedEpisode(seed=i)), {"codebase": "light", "env_settings": {"step_s": 0.2}})
            for i in range(520)
        ]
        outcomes = asyncio.run(pool.run_many(jobs))
        assert [o.status for o in outcomes] == ["ok"] * 520
        assert all(o.value.success for o in outcomes)
        assert pool.book.submitted == pool.book.ok == 520 and pool.book.balanced()
        # Four actors served 520 concurrent episodes.
        pids = {ray.get(h.pid.remote()) for h in pool.loop.hosts() + pool.envs["light"].hosts()}
        assert len(pids) == 4
    finally:
        pool.shutdown()


class Gate:
    """A Ray actor holding tenants until the test releases them, and telling which host each is on."""

    def __init__(self) -> None:
        self.hosts: dict[int, int] = {}
        self.opened: dict[int, asyncio.Event] = {}

    async def hold(self, tenant: int, pid: int) -> None:
        self.hosts[tenant] = pid
        await self.opened.setdefault(tenant, asyncio.Event()).wait()

    def where(self) -> dict[int, int]:
        return self.hosts

    def release(self, tenants: list[int]) -> None:
        for tenant in tenants:
            self.opened.setdefault(tenant, asyncio.Event()).set()


@dataclass(frozen=True)
class Held:
    """A tenant that waits at ``gate`` until released, then answers with its host's pid."""

    gate: Any
    number: int

    async def run(self, ctx: TenantContext) -> int:
        pid = await ctx.to_thread(os.getpid)
        await self.gate.hold.remote(self.number, pid)
        return pid


async def _until(condition, what: str) -> None:
    for _ in range(1200):  # bounded, not timed: a slow machine only polls longer
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_least_in_flight_placement_fills_the_hosts_whose_tenants_finished(ray_session):
    """Two hosts' tenants finish while the other two hosts' run on: every new tenant must go to
    the two emptied hosts (round-robin or random placement would stack the busy ones)."""
    ray = ray_session
    pool = _pool(total=5, shares={"loop": 4, "light": 1})
    gate = ray.remote(Gate).options(max_concurrency=100).remote()
    try:

        async def main():
            first = [asyncio.ensure_future(pool.run(Held(gate, i))) for i in range(12)]
            await _until(lambda: pool.loop.in_flight() == [3, 3, 3, 3], "12 tenants spread 3 a host")
            await _until(lambda: len(ray.get(gate.where.remote())) == 12, "12 tenants at the gate")
            on_pid = ray.get(gate.where.remote())
            finishing_pids = sorted(set(on_pid.values()))[:2]
            ray.get(gate.release.remote([t for t, pid in on_pid.items() if pid in finishing_pids]))
            finished = [first[t] for t, pid in on_pid.items() if pid in finishing_pids]
            done = await asyncio.gather(*finished)
            emptied = {o.host for o in done}
            assert len(finished) == 6 and len(emptied) == 2
            assert [n for i, n in enumerate(pool.loop.in_flight()) if i not in emptied] == [3, 3]

            second = [asyncio.ensure_future(pool.run(Held(gate, 100 + i))) for i in range(6)]
            await _until(lambda: sum(pool.loop.in_flight()) == 12, "6 more tenants placed")
            assert pool.loop.in_flight() == [3, 3, 3, 3]
            ray.get(gate.release.remote([t for t in on_pid] + [100 + i for i in range(6)]))
            rest = await asyncio.gather(*first, *second)
            assert all(o.status == "ok" for o in rest)
            assert {o.host for o in rest[-6:]} == emptied

        asyncio.run(main())
    finally:
        pool.shutdown()


def test_a_failing_tenant_is_reported_and_its_neighbours_finish(ray_session):
    pool = _pool()
    try:
        jobs = [(Sleeper(0.3, fail=(i == 5)), {}) for i in range(20)]
        jobs.append((ScriptedEpisode(seed=3), {"codebase": "light", "env_settings": {"crash_seed": 3}}))
        outcomes = asyncio.run(pool.run_many(jobs))
        statuses = [o.status for o in outcomes]
        assert statuses.count("failed") == 2 and statuses.count("ok") == 19
        assert "ValueError: tenant asked to fail" in outcomes[5].error
        assert "harness exploded on seed 3" in outcomes[-1].error
        book = pool.book  # a tenant's own failure is not retried: nothing resubmitted
        assert (book.submitted, book.ok, book.failed, book.resubmitted) == (21, 19, 2, 0) and book.balanced()
        # The hosts are alive and serve new tenants.
        assert asyncio.run(pool.run(Sleeper(0.01))).status == "ok"
    finally:
        pool.shutdown()


def test_a_tenant_past_its_timeout_is_stopped_and_reported(ray_session):
    # 0.1 s and 0.2 s sleepers finish far inside the 5 s bound even on a loaded machine
    pool = _pool(loop=HostConfig(max_tenants=64, tenant_timeout_s=5.0))
    try:
        outcomes = asyncio.run(pool.run_many([(Sleeper(300), {}), (Sleeper(0.1), {}), (Sleeper(0.2), {})]))
        assert [o.status for o in outcomes] == ["timeout", "ok", "ok"]
        assert "ran longer than 5 s" in outcomes[0].error
        assert pool.book.timeout == 1 and pool.book.balanced()
    finally:
        pool.shutdown()


@pytest.mark.parametrize("side", ["loop", "env"])
def test_a_killed_host_mid_run_loses_no_episode(ray_session, side):
    ray = ray_session
    pool = _pool()
    try:

        async def main():
            jobs = [(ScriptedEpisode(seed=i), {"codebase": "light", "env_settings": {"step_s": 0.4}}) for i in range(40)]
            run = asyncio.ensure_future(pool.run_many(jobs))
            victims = pool.loop.hosts() if side == "loop" else pool.envs["light"].hosts()
            while await victims[0].in_flight.remote() == 0:  # killed mid-run: with tenants on it
                await asyncio.sleep(0.02)
            ray.kill(victims[0], no_restart=True)
            return await run

        outcomes = asyncio.run(main())
        assert [o.status for o in outcomes] == ["ok"] * 40
        assert sorted(o.value.seed for o in outcomes) == list(range(40))
        book = pool.book
        deaths = book.loop_host_deaths if side == "loop" else book.env_host_deaths
        assert deaths == 1 and book.resubmitted >= 1
        assert book.submitted == book.ok == 40 and book.balanced()
        # The dead host's slot holds a fresh host that works.
        assert asyncio.run(pool.run(ScriptedEpisode(seed=99), codebase="light")).status == "ok"
    finally:
        pool.shutdown()


def test_budget_shares_give_the_configured_pool_sizes_and_codebases_get_separate_pools(ray_session, tmp_path):
    ray = ray_session
    pool = _pool(total=5, shares={"loop": 2, "light": 2, "light-other": 1})
    try:
        assert pool.sizes() == {"loop": 2, "light": 2, "light-other": 1}
        settings = {"open_dir": str(tmp_path)}
        jobs = [(ScriptedEpisode(seed=i), {"codebase": "light", "env_settings": settings}) for i in range(6)]
        jobs += [(ScriptedEpisode(seed=i), {"codebase": "light-other", "env_settings": settings}) for i in range(6)]
        asyncio.run(pool.run_many(jobs))
        light = {ray.get(h.pid.remote()) for h in pool.envs["light"].hosts()}
        other = {ray.get(h.pid.remote()) for h in pool.envs["light-other"].hosts()}
        loop = {ray.get(h.pid.remote()) for h in pool.loop.hosts()}
        assert len(light) == 2 and len(other) == 1 and len(loop) == 2
        assert not (light & other) and not (loop & (light | other))
        # Warm instances stay open between episodes; each is closed at shutdown.
        assert list(tmp_path.iterdir())
    finally:
        pool.shutdown()
    assert list(tmp_path.iterdir()) == []


def test_env_hosts_keep_instances_warm_between_leases(ray_session):
    ray = ray_session
    pool = _pool(total=2)
    try:
        for seed in range(5):
            assert asyncio.run(pool.run(ScriptedEpisode(seed=seed), codebase="light")).status == "ok"
        (host,) = pool.envs["light"].hosts()
        assert ray.get(host.instances.remote()) == 1 and ray.get(host.in_flight.remote()) == 0
    finally:
        pool.shutdown()


@dataclass(frozen=True)
class Writer:
    """Writes an image reference and a sequence through its ledger; its first run then stalls
    until its loop host is killed, the second returns its key."""

    store: Any

    async def run(self, ctx: TenantContext) -> str:
        key = f"seq/{ctx.tenant_id}"
        row = {"token_ids": np.arange(4, dtype=np.int32)}
        await ctx.to_thread(lambda: ctx.writes.put_shared(self.store, "img/shared", row, holder=key))
        await ctx.to_thread(lambda: ctx.writes.put(self.store, key, row))
        if ctx.tenant_id.endswith(".1"):
            await asyncio.sleep(60)
        return key


def test_writes_of_a_run_whose_loop_host_died_are_named_for_the_store_owner(ray_session):
    ray = ray_session
    from vlrl.store.ray_store import RayStore

    store = RayStore.Config().build()
    pool = _pool(total=2)
    try:

        async def main():
            run = asyncio.ensure_future(pool.run(Writer(store), tenant_id="t"))
            while not store.contains(["seq/t.1"])[0]:
                await asyncio.sleep(0.05)
            ray.kill(pool.loop.hosts()[0], no_restart=True)
            return await run

        outcome = asyncio.run(main())
        assert outcome.status == "ok" and outcome.value == "seq/t.2" and outcome.lost_writers == ("t.1",)
        assert sorted(store.take_back(list(outcome.lost_writers))) == ["seq/t.1"]  # the image is still held
        assert store.holds([("img/shared", "seq/t.1"), ("img/shared", "seq/t.2")]) == [False, True]
        store.delete(["seq/t.2"])
        assert store.release([("img/shared", "seq/t.2")]) == ["img/shared"] and store.stats().keys == 0
    finally:
        pool.shutdown()
        store.destroy()
