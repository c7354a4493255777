"""The driver under store faults: a hook the store fails is retried, a group it keeps failing
(or whose payload a dead shard took) leaves as ``failed`` with its keys deleted, and the run goes
on with balanced books."""

from __future__ import annotations

import asyncio

import pytest
import ray

from tests.helpers.stored_trajectory import StoredTrajectory
from tests.integration.control.test_driver import A, _balanced, built_parts, ended, one_batch
from tests.integration.store.test_faults import restart_shards
from vlrl.control.driver import Driver, DriverStalled
from vlrl.store import StoreTimeoutError
from vlrl.store.ray_store import RayStore


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


@pytest.fixture()
def parts(ray_session):
    """A pool and store per test: these tests kill and restart the store's shards."""
    parts = built_parts()
    yield parts
    ended(parts)


def _mixed(source, seed, group_id, index):
    return StoredTrajectory(source, seed, group_id, index, always_mixed=True)


def test_a_transient_store_error_in_the_hook_is_retried_and_the_group_accepted(parts):
    pool, store = parts
    flaky = FailingGets(store, failures=2)
    driver = Driver(Driver.Config(groups_per_batch=1, hook_retry_s=0.01), [A], pool, flaky, tenant_factory=_mixed)

    batch = one_batch(driver)
    assert [g.decision.status for g in batch.groups] == ["accepted"] and flaky.gets >= 3
    assert driver.book.failed == 0 and _balanced(driver.book)
    assert store.stats().keys == 0


def test_a_store_that_keeps_failing_the_hook_fails_groups_not_the_driver(parts):
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


def test_dead_shards_fail_their_groups_and_the_driver_goes_on(parts):
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


def _restart_every_shard(store: RayStore) -> None:
    restart_shards(store, list(range(len(store._shards._shards))))


def test_groups_a_restarted_shard_lost_fail_before_training_and_the_run_goes_on(parts):
    pool, store = parts
    config = Driver.Config(groups_per_batch=1, prefetch_batches=2, hook_retry_s=0.01)
    driver = Driver(config, [A], pool, store, tenant_factory=_mixed)

    async def main():
        first = await driver.next_batch(policy_version=0)
        driver.consumed(first)
        while sum(len(b) for b in driver._buffer.values()) < 2:  # groups for later batches, already accepted
            await driver._wait_for_progress()
        _restart_every_shard(store)  # their payloads are gone
        second = await driver.next_batch(policy_version=0)
        rows = store.get([meta.key for meta in second.sequences])  # the trainer's reads all succeed
        pixels = store.get([item.store_key for meta in second.sequences for item in meta.images])
        driver.consumed(second)
        await driver.close()
        return rows, pixels

    rows, pixels = asyncio.run(main())
    assert rows and pixels
    book = driver.book
    assert book.reasons["failed: payload lost with a store shard before training"] >= 2
    assert book.trained == 2 and _balanced(book) and book.pending == 0
    assert store.stats().keys == 0  # nothing the dead shards' successors hold outlives the run


class FailingSecondAdvantage(RayStore):
    """The hook's first write of advantages to a group's second sequence times out, after the
    first sequence's went through: a retry meets a row it wrote itself."""

    def __init__(self, store: RayStore) -> None:
        super().__init__(store._config, store._shards)
        self.adds = 0

    def add_fields(self, key, fields):
        self.adds += 1
        if self.adds == 2:
            raise StoreTimeoutError(f"store shard 'x/0' did not answer (add_fields {key!r})")
        return super().add_fields(key, fields)


def test_a_hook_retry_after_a_partial_write_completes_the_group(parts):
    pool, store = parts
    flaky = FailingSecondAdvantage(store)
    config = Driver.Config(groups_per_batch=1, prefetch_batches=0, max_groups_in_flight=1, hook_retry_s=0.01)
    driver = Driver(config, [A], pool, flaky, tenant_factory=_mixed)

    async def main():
        batch = await driver.next_batch(policy_version=0)
        adds = flaky.adds
        advantages = store.get([meta.key for meta in batch.sequences], fields=["advantages"])
        driver.consumed(batch)
        await driver.close()
        return batch, advantages, adds

    batch, advantages, adds = asyncio.run(main())
    assert len(advantages) == A.group_size
    assert adds == 2 + A.group_size  # the first try's two calls, then the retry's for every sequence
    assert [g.decision.status for g in batch.groups] == ["accepted"] and driver.book.failed == 0
    assert store.stats().keys == 0


def test_a_batch_the_trainer_could_not_read_is_requeued_and_refilled(parts):
    pool, store = parts
    driver = Driver(Driver.Config(groups_per_batch=1, hook_retry_s=0.01), [A], pool, store, tenant_factory=_mixed)

    async def main():
        batch = await driver.next_batch(policy_version=0)
        _restart_every_shard(store)  # under the trainer's step: its payload is gone
        driver.requeue(batch)
        again = await driver.next_batch(policy_version=0)
        rows = store.get([meta.key for meta in again.sequences])
        driver.consumed(again)
        await driver.close()
        return batch, again, rows

    batch, again, rows = asyncio.run(main())
    assert again.step == batch.step == 1 and again.groups[0].group_id != batch.groups[0].group_id and rows
    book = driver.book
    assert book.reasons["failed: payload lost with a store shard before training"] >= 1
    assert book.trained == 1 and _balanced(book) and book.pending == 0
    assert store.stats().keys == 0
