"""A judge that never answers (that grading has a default timeout is
tests/unit/control/test_driver_grading.py): groups waiting on it count against the driver's
in-flight bound, and each hung grade ends as a counted failed group whose keys are
deleted."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.helpers.stored_trajectory import StoredTrajectory, StoreSetup
from vlrl.config import DataSource, EnvSettings
from vlrl.control.driver import Driver, DriverStalled
from vlrl.control.grader import GraderRunner
from vlrl.harness import register
from vlrl.pool import HarnessPool, HostBudget, HostConfig
from vlrl.store.ray_store import RayStore

register("light", "tests.helpers.light_harness:LightHarness")

SOURCE = DataSource(name="a", codebase="light", group_size=2, env=EnvSettings(params={"step_s": 0.01}))


class NeverReturns:
    async def grade(self, metas):
        await asyncio.Event().wait()


def test_a_hung_judge_holds_back_rollouts_and_its_groups_fail_counted(ray_session):
    store = RayStore.Config(namespace=uuid.uuid4().hex[:8]).build()
    pool = HarnessPool.Config(
        budget=HostBudget(total_hosts=2, shares={"loop": 1, "light": 1}),
        loop_host=HostConfig(max_tenants=64),
        env_host=HostConfig(max_tenants=64),
    ).build(loop_setup=StoreSetup(store))
    undecided: list[int] = []  # the driver's undecided groups each time one starts

    def tenant(source, seed, group_id, index):
        undecided.append(driver.book.pending)
        return StoredTrajectory(source, seed, group_id, index, always_mixed=True)

    config = Driver.Config(
        groups_per_batch=1,
        max_groups_in_flight=2,
        prefetch_batches=8,  # the per-source share would allow 9 groups: the in-flight bound must hold
        stall_groups=4,
        grader=GraderRunner.Config(timeout_s=0.3, max_attempts=1, backoff_s=0),
    )
    driver = Driver(config, [SOURCE], pool, store, grader=NeverReturns(), tenant_factory=tenant)

    async def main():
        try:
            with pytest.raises(DriverStalled, match="failed: grader NeverReturns failed attempts .* TimeoutError"):
                await driver.next_batch(policy_version=0)
        finally:
            await driver.close()

    try:
        asyncio.run(main())
        book = driver.book
        assert max(undecided) <= 2, f"undecided groups when one started: {undecided}"
        assert book.failed >= 4 and book.accepted == 0 and book.pending == 0
        assert driver.books_drift() == [], driver.books_drift()
        assert store.stats().keys == 0  # sequences and their images
    finally:
        pool.shutdown()
        store.destroy()
