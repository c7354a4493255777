"""A group naming an image that another writer's failed write left unwritten fails counted before
training (the store keeps its reference for the image's next writer), on in-process parts."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np

from tests.unit.control.test_driver_books import SOURCE, write_episode
from vlrl.control.driver import Driver
from vlrl.mm import describe_image
from vlrl.pool.tenant import TenantOutcome
from vlrl.records import PIXELS
from vlrl.store.local import LocalStore


class SharingPool:
    """Writes each episode to the store; the sequence of group ``broken`` takes the image another
    writer is writing, and that write fails."""

    def __init__(self, store: LocalStore, broken: int) -> None:
        self.store, self.broken = store, broken
        self.refs: list[tuple[str, str]] = []  # (image, sequence) references taken on the unwritten image

    async def run(self, tenant: tuple[int, str, int], *, tenant_id: str, **_: Any) -> TenantOutcome:
        seed, group_id, index = tenant
        await asyncio.sleep(0)
        meta = write_episode(self.store, group_id, index)
        if (seed, index) == (self.broken, 1):
            pixels = np.zeros((8, 8, 3), np.uint8)
            image = describe_image(pixels)

            def fails_after_the_share(key, arrays, specs):
                assert self.store.share([key], meta.key) == [True]  # taken while the other writes it
                raise OSError("the other writer's disk is full")

            self.store._write_fields = fails_after_the_share
            try:
                self.store.put_shared(image.store_key, {PIXELS: pixels}, holder="seq/other")
            except OSError:
                pass
            finally:
                del self.store._write_fields
            meta = dataclasses.replace(meta, images=(image,))
            self.refs.append((image.store_key, meta.key))
        return TenantOutcome(tenant_id, "ok", value=[meta])


def test_a_group_naming_an_image_whose_write_failed_fails_before_training():
    store = LocalStore(image_tile_px=None)
    pool = SharingPool(store, broken=1)
    driver = Driver(
        Driver.Config(groups_per_batch=2),
        [SOURCE],
        pool,
        store,
        tenant_factory=lambda source, seed, group_id, index: (seed, group_id, index),
    )

    async def main() -> list[str]:
        batch = await driver.next_batch(policy_version=0)
        keys = [meta.key for meta in batch.sequences]
        assert all(store.contains(keys))
        driver.consumed(batch)
        await driver.close()
        return [image.store_key for meta in batch.sequences for image in meta.images]

    assert asyncio.run(main()) == []  # the trainer never got the unwritten image
    book = driver.book
    assert book.reasons["failed: an image it names is not written before training"] == 1
    assert book.trained == 2 and driver.books_drift() == [] and store.stats().keys == 0
    assert len(pool.refs) == 1 and store.holds(pool.refs) == [False]  # the image's row went with the group
