"""The driver's staleness check on in-process parts: the buffer is scanned when the oldest
trainable version rises, and a group that finishes after that scan, already too old, leaves as
stale on arrival instead of being trained."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.control.test_driver_books import SOURCE, write_episode
from vlrl.control.driver import Driver
from vlrl.pool.tenant import TenantOutcome
from vlrl.store.local import LocalStore


class GatedPool:
    """Writes each episode to the store, tagged with the policy version its tenant was launched
    under; the episodes of task seed ``gated`` finish only once ``gate`` is set."""

    def __init__(self, store: LocalStore, gated: int) -> None:
        self.store, self.gated, self.gate = store, gated, asyncio.Event()

    async def run(self, tenant: tuple[int, str, int, int], *, tenant_id: str, **_: Any) -> TenantOutcome:
        seed, group_id, index, version = tenant
        if seed == self.gated:
            await self.gate.wait()
        await asyncio.sleep(0)
        return TenantOutcome(tenant_id, "ok", value=[write_episode(self.store, group_id, index, version)])


def test_a_group_that_finishes_after_the_scan_already_too_old_leaves_as_stale_on_arrival():
    store = LocalStore(image_tile_px=None)
    version = [0]  # the policy version new rollouts are launched under
    pool = GatedPool(store, gated=1)
    driver = Driver(
        Driver.Config(groups_per_batch=1, max_staleness=0, prefetch_batches=1, max_groups_in_flight=2),
        [SOURCE], pool, store,
        tenant_factory=lambda source, seed, group_id, index: (seed, group_id, index, version[0]),
    )  # fmt: skip

    async def main() -> Any:
        first = await driver.next_batch(policy_version=0)  # seed 0; seed 1 (version 0) is held back
        driver.consumed(first)
        version[0] = 1
        second = asyncio.ensure_future(driver.next_batch(policy_version=1))
        for _ in range(5):
            await asyncio.sleep(0)  # the buffer is scanned for version 1 and seed 2 is launched
        pool.gate.set()  # seed 1 finishes now, after the scan, with no token newer than version 0
        batch = await second
        driver.consumed(batch)
        await driver.close()
        return first, batch

    first, second = asyncio.run(main())
    assert [g.group_id for g in first.groups] == ["click/0"]
    assert [g.group_id for g in second.groups] == ["click/2"] and second.groups[0].policy_version == 1
    book = driver.book
    assert book.stale == 1 and book.reasons["stale: policy version (its newest) older than"] == 1
    assert book.trained == 2 and driver.books_drift() == [] and store.stats().keys == 0
