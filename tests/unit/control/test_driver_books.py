"""The driver's books on in-process parts (a real driver and store, a pool that writes each
episode straight to the store): every term counted from what happened, a counter bumped by hand
named by the check, and a raising ``pool.run`` failing only its group."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from vlrl.config import DataSource, EnvSettings
from vlrl.control.driver import Driver
from vlrl.control.driver_book import OUTCOMES
from vlrl.pool.tenant import TenantOutcome
from vlrl.records import SeqMeta
from vlrl.store.local import LocalStore

SOURCE = DataSource(name="click", codebase="none", group_size=2, env=EnvSettings())
TOKENS = 6


def write_episode(store: LocalStore, group_id: str, index: int, version: int = 0) -> SeqMeta:
    """One played episode's payload in ``store`` and its metadata: sample 0 succeeds, others fail."""
    key = f"seq/{group_id}/{index}"
    store.put(key, {
        "token_ids": np.arange(TOKENS, dtype=np.int32),
        "logprobs": np.full(TOKENS, -0.5, dtype=np.float32),
        "loss_mask": np.arange(TOKENS) >= 2,
    })  # fmt: skip
    return SeqMeta(
        key=key, group_id=group_id, source=SOURCE.name, sample_index=index, reward=float(index == 0),
        success=index == 0, finish="done", turns=1, num_tokens=TOKENS, num_response_tokens=TOKENS - 2,
        context_lengths=(2,), policy_version=version,
    )  # fmt: skip


class WritingPool:
    """Plays each episode by writing its payload to the store (sample 0 succeeds, 1 fails: every
    group is mixed and accepted); the run of a tenant in ``raises`` raises instead."""

    def __init__(self, store: LocalStore, raises: tuple[tuple[int, int], ...] = ()) -> None:
        self.store, self.raises = store, raises

    async def run(self, tenant: tuple[int, str, int], *, tenant_id: str, **_: Any) -> TenantOutcome:
        seed, group_id, index = tenant
        await asyncio.sleep(0)
        if (seed, index) in self.raises:
            raise RuntimeError(f"pool broke under {tenant_id}")
        meta = write_episode(self.store, group_id, index)
        return TenantOutcome(tenant_id, "ok", value=[meta])


def _driver(raises: tuple[tuple[int, int], ...] = ()) -> tuple[Driver, LocalStore]:
    store = LocalStore(image_tile_px=None)
    driver = Driver(
        Driver.Config(groups_per_batch=2),
        [SOURCE],
        WritingPool(store, raises),
        store,
        tenant_factory=lambda source, seed, group_id, index: (seed, group_id, index),
    )
    return driver, store


def _one_step(driver: Driver) -> None:
    async def main() -> None:
        batch = await driver.next_batch(policy_version=0)
        assert not driver.books_drift(), driver.books_drift()  # groups in flight, buffered and training
        driver.consumed(batch)
        await driver.close()

    asyncio.run(main())


def test_a_raising_pool_run_fails_only_its_group_and_leaves_no_key():
    driver, store = _driver(raises=((1, 1),))
    _one_step(driver)
    book = driver.book
    assert book.failed == 1 and book.trained == 2 and book.pending == 0
    (reason,) = [r for r in book.reasons if r.startswith("failed: ")]
    assert reason == "failed: trajectory(ies) failed: pool.run raised RuntimeError: pool broke under"
    assert driver.books_drift() == [] and store.stats().keys == 0  # the sibling's keys were deleted


@pytest.mark.parametrize("counter", ["generated", "accepted", *OUTCOMES])
def test_a_counter_changed_by_hand_is_named_by_the_books_check(counter):
    driver, _ = _driver(raises=((1, 1),))
    _one_step(driver)
    assert driver.books_drift() == []
    setattr(driver.book, counter, getattr(driver.book, counter) + 1)
    drift = driver.books_drift()
    assert any(line.startswith(f"{counter}: counted") for line in drift), drift


def test_a_group_the_book_lost_track_of_is_named():
    driver, _ = _driver()

    async def main() -> list[str]:
        await driver.fill(policy_version=0)
        buffered = next(g for g, place in driver.book.where.items() if place == "buffered")
        driver.book.where[buffered] = "deciding"  # the book says open, the driver's buffer holds it
        return driver.books_drift()

    drift = asyncio.run(main())
    assert any(line.startswith("pending: the book holds") and "buffered" in line for line in drift), drift
