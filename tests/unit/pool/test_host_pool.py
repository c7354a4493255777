"""``HostPool``'s placement without Ray (hosts are names): tenants that start a program of the
user's hold a program slot, bounded per host and per pool; other tenants pass them by."""

from __future__ import annotations

import asyncio

import pytest

from vlrl.pool.host_pool import HostPool
from vlrl.rollout.agent_loop import AgentLoop
from vlrl.rollout.external.run import ExternalRun


def _pool(size: int = 2, capacity: int = 64) -> HostPool:
    return HostPool("loop", size, capacity, lambda i, name: name)


async def _play(pool: HostPool, programs: int, others: int) -> tuple[list[int], list[list[int]], list[str]]:
    """Run ``programs`` program tenants and ``others`` plain ones, each holding its lease for a few
    event-loop turns; return the pool-wide program count and the per-host counts seen at every
    claim, and the order in which tenants got their lease."""
    seen_total, seen_hosts, order = [], [], []

    async def tenant(name: str, program: bool) -> None:
        lease = await pool.acquire(program=program)
        order.append(name)
        seen_total.append(pool.programs)
        seen_hosts.append([slot.programs for slot in pool._slots])
        for _ in range(3):
            await asyncio.sleep(0)
        await pool.release(lease)

    jobs = [tenant(f"program-{i}", True) for i in range(programs)] + [tenant(f"loop-{i}", False) for i in range(others)]
    await asyncio.gather(*jobs)
    return seen_total, seen_hosts, order


def test_programs_wait_for_a_slot_per_host_and_per_pool():
    pool = _pool()
    pool.bound_programs([2, 2], max_programs=3)
    totals, hosts, order = asyncio.run(_play(pool, programs=12, others=4))
    assert len(order) == 16 and max(totals) == 3 and all(max(counts) <= 2 for counts in hosts)
    # The four plain tenants were queued last, behind twelve programs, and did not wait for them.
    assert max(order.index(f"loop-{i}") for i in range(4)) < order.index("program-11")
    assert pool.programs == 0 and pool.in_flight() == [0, 0]


def test_each_host_bound_holds_without_a_pool_bound_and_an_unbounded_pool_lets_all_run():
    pool = _pool()
    pool.bound_programs([1, 3])
    totals, hosts, _ = asyncio.run(_play(pool, programs=12, others=0))
    assert max(totals) == 4 and max(h[0] for h in hosts) == 1 and max(h[1] for h in hosts) == 3
    unbounded = _pool()
    totals, _, _ = asyncio.run(_play(unbounded, programs=12, others=0))
    assert unbounded.programs == 0 and totals == [0] * 12  # no bound: no program slots counted at all


def test_program_caps_are_checked():
    with pytest.raises(ValueError, match=r"program caps \[2\]; expected 2 caps of at least 1"):
        _pool().bound_programs([2])
    with pytest.raises(ValueError, match=r"program caps \[0, 2\]"):
        _pool().bound_programs([0, 2])


def test_an_agent_program_tenant_starts_a_program_and_the_agent_loop_does_not():
    assert ExternalRun.starts_program is True
    assert getattr(AgentLoop, "starts_program", False) is False
