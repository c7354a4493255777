"""The driver under store faults: a hook the store fails is retried, a group it keeps failing
(or whose payload a dead shard took) leaves as ``failed`` with its keys deleted, and the run goes
on with balanced books."""

from __future__ import annotations

import asyncio

import pytest
import ray

from tests.control.stored_trajectory import StoredTrajectory
from tests.control.test_driver import A, _balanced, parts  # noqa: F401  (the fixture)
from vlrl.control.driver import Driver, DriverStalled
from vlrl.store import StoreTimeoutError
from vlrl.store.ray_store import RayStore

pytestmark = pytest.mark.ray


class FailingGets(RayStore):
    """The driver's client of the run's store: its first ``failures`` gets raise (the loop hosts
    write through their own, sound, client)."""

    def __init__(self, store: RayStore, failures: int) -> None:
        super().__init__(store._config, store._shards)
        self.failures, self.gets = failures, 0

    def get(self, keys, fields=None):
        self.gets += 1
        if self.gets <= self.failures:
            raise StoreTimeoutError(f"store shard 'x/0' did not answer (get {self.gets})")
        return super().get(keys, fields)


def _mixed(source, seed, group_id, index):
    return StoredTrajectory(source, seed, group_id, index, always_mixed=True)


def test_a_transient_store_error_in_the_hook_is_retried_and_the_group_accepted(parts):  # noqa: F811
    pool, store = parts
    flaky = FailingGets(store, failures=2)
    driver = Driver(Driver.Config(groups_per_batch=1, hook_retry_s=0.01), [A], pool, flaky, tenant_factory=_mixed)

    async def main():
        batch = await driver.next_batch(policy_version=0)
        driver.consumed(batch)
        await driver.close()
        return batch

    batch = asyncio.run(main())
    assert [g.decision.status for g in batch.groups] == ["accepted"] and flaky.gets >= 3
    assert driver.book.failed == 0 and _balanced(driver.book)
    assert store.stats().keys == 0


def test_a_store_that_keeps_failing_the_hook_fails_groups_not_the_driver(parts):  # noqa: F811
    pool, store = parts
    broken = FailingGets(store, failures=10**9)
    config = Driver.Config(groups_per_batch=1, hook_retries=2, hook_retry_s=0.01, stall_groups=3)
    driver = Driver(config, [A], pool, broken, tenant_factory=_mixed)

    async def main():
        with pytest.raises(DriverStalled, match="failed: accept-time hook: StoreTimeoutError"):
            await driver.next_batch(policy_version=0)
        await driver.close()

    asyncio.run(main())
    book = driver.book
    assert book.failed >= 3 and book.accepted == 0 and _balanced(book)
    assert broken.gets == 3 * book.failed  # each failed group: one try and two retries
    assert store.stats().keys == 0  # the failed groups' sequences and images were deleted


def test_dead_shards_fail_their_groups_and_the_driver_goes_on(parts):  # noqa: F811
    pool, store = parts
    config = Driver.Config(groups_per_batch=1, hook_retry_s=0.01, stall_groups=4)
    driver = Driver(config, [A], pool, store, tenant_factory=_mixed)
    for shard in store._shards._shards:  # all of them, so that no group is lucky enough to miss it
        ray.kill(shard)

    async def main():
        with pytest.raises(DriverStalled):
            await driver.next_batch(policy_version=0)
        await driver.close()

    asyncio.run(main())
    book = driver.book
    assert book.failed >= 4 and _balanced(book)
    assert any("ShardLostError" in reason for reason in book.reasons)
