"""The driver on real parts (Ray pool, light harness, Ray store): shares, sampling, staleness,
grading, failures, and exact books with no key left behind."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, replace

import pytest

from tests.helpers.stored_trajectory import StoredTrajectory, StoreSetup
from vlrl.config import DataSource, EnvSettings, Replay
from vlrl.control.driver import Driver, DriverStalled
from vlrl.control.grader import GraderRunner
from vlrl.control.group_hook import GroupHook
from vlrl.control.sampler import PassRateSampler
from vlrl.harness import register
from vlrl.mm.image_rows import read_images
from vlrl.pool import HarnessPool, HostBudget, HostConfig
from vlrl.records import Batch
from vlrl.store.ray_store import RayStore

register("light", "tests.helpers.light_harness:LightHarness")
register("light-other", "tests.helpers.light_harness:OtherLightHarness")
register("light-hang", "tests.helpers.light_harness:HangingLightHarness")

A = DataSource(name="a", codebase="light", group_size=4, batch_share=3.0, env=EnvSettings(params={"step_s": 0.01}))
B = DataSource(name="b", codebase="light-other", group_size=2, batch_share=1.0, env=EnvSettings(params={"step_s": 0.01}))


def built_parts() -> tuple[HarnessPool, RayStore]:
    """A Ray store and a pool of light-harness hosts writing to it (end them with ``ended``)."""
    store = RayStore.Config(namespace=uuid.uuid4().hex[:8]).build()
    pool = HarnessPool.Config(
        budget=HostBudget(total_hosts=3, shares={"loop": 1, "light": 1, "light-other": 1}),
        loop_host=HostConfig(max_tenants=64),
        env_host=HostConfig(max_tenants=64),
    ).build(loop_setup=StoreSetup(store))
    return pool, store


def ended(parts: tuple[HarnessPool, RayStore]) -> None:
    pool, store = parts
    pool.shutdown()
    store.destroy()


@pytest.fixture(scope="module")
def module_parts(ray_session):
    """One pool and store for the module: each test closes its driver and most check that no key
    is left, so a test starts on an empty store without a pool of its own (three hosts' actors)."""
    holder = [built_parts()]
    yield holder
    ended(holder[0])


@pytest.fixture
def parts(module_parts):
    """The module's pool and store, built afresh after a failed test left keys behind: its group
    ids would collide with the next test's, and one failure would read as many."""
    if module_parts[0][1].stats().keys:
        ended(module_parts[0])
        module_parts[0] = built_parts()
    return module_parts[0]


def _factory(version: int = 0):
    return lambda source, seed, group_id, index: StoredTrajectory(source, seed, group_id, index, version)


def _balanced(book) -> bool:
    """The books from independent counts agree: outcomes add up to their reasons, generated to the
    outcomes and the open groups, accepted to the trained and held groups (``DriverBook.drift``)."""
    return book.drift() == []


def one_batch(driver: Driver) -> Batch:
    """The driver's first batch, consumed, then the driver closed (nothing of it may remain)."""

    async def main() -> Batch:
        batch = await driver.next_batch(policy_version=0)
        driver.consumed(batch)
        await driver.close()
        return batch

    return asyncio.run(main())


def test_batches_honour_source_shares_and_nothing_outlives_consumption(parts):
    pool, store = parts
    driver = Driver(Driver.Config(groups_per_batch=4), [A, B], pool, store, tenant_factory=_factory())

    async def main():
        batches = []
        for _ in range(2):
            batch = await driver.next_batch(policy_version=0)
            batches.append(batch)
            driver.consumed(batch)
        await driver.close()
        return batches

    batches = asyncio.run(main())
    for batch in batches:
        assert batch.per_source() == {"a": 3, "b": 1}
        assert len(batch.sequences) == 3 * 4 + 1 * 2
        assert {g.decision.status for g in batch.groups} == {"accepted"}
    book = driver.book
    # Even task seeds fail every trajectory: the sampler rejects those groups on metadata.
    assert book.rejected >= 1 and any("rejected: pass rate" in r for r in book.reasons)
    assert book.trained == 8 and _balanced(book)
    assert store.stats().keys == 0  # sequences and images: every key was deleted


def test_advantages_are_in_the_store_for_every_trained_sequence(parts):
    pool, store = parts
    driver = Driver(Driver.Config(groups_per_batch=1), [A], pool, store, tenant_factory=_factory())

    async def main():
        batch = await driver.next_batch(policy_version=0)
        rows = store.get([m.key for m in batch.sequences], ["advantages", "loss_mask"])
        driver.consumed(batch)
        await driver.close()
        return batch, rows

    batch, rows = asyncio.run(main())
    (group,) = batch.groups
    for meta, advantage in zip(group.metas, group.decision.advantages):
        row = rows[meta.key]
        assert (row["advantages"][row["loss_mask"]] == advantage).all() and (row["advantages"][~row["loss_mask"]] == 0).all()


def test_failed_trajectories_fail_their_group_and_the_books_balance(parts, caplog):
    pool, store = parts
    crashing = replace(A, env=EnvSettings(params={"step_s": 0.01, "crash_seed": 3}))
    driver = Driver(Driver.Config(groups_per_batch=2), [crashing], pool, store, tenant_factory=_factory())

    with caplog.at_level("WARNING", logger="vlrl.control.driver"):
        one_batch(driver)
    book = driver.book
    assert book.failed == 1 and any(r.startswith("failed: ") and "EnvCallError" in r for r in book.reasons)
    (logged,) = [r.getMessage() for r in caplog.records if "failed; its first failed" in r.getMessage()]
    assert logged.startswith("group a/3 failed") and "harness exploded" in logged  # the whole error, with its group
    assert _balanced(book) and store.stats().keys == 0


def test_a_hung_thread_bound_harness_whose_release_times_out_fails_its_group_counted(ray_session, caplog):
    """The step of task seed 1 outlives the env host's call timeout on the instance's only thread,
    so the close that its release queues there times out too: the group fails as a counted
    outcome naming both, no key is left, and the run goes on to its batch."""
    store = RayStore.Config(namespace=uuid.uuid4().hex[:8]).build()
    pool = HarnessPool.Config(
        budget=HostBudget(total_hosts=2, shares={"loop": 1, "light-hang": 1}),
        loop_host=HostConfig(max_tenants=64),
        env_host=HostConfig(max_tenants=64, tenant_timeout_s=1.0),
        max_attempts=1,
    ).build(loop_setup=StoreSetup(store))
    hanging = DataSource(
        name="a", codebase="light-hang", group_size=2, env=EnvSettings(params={"hang_seed": 1, "hang_s": 3.0})
    )
    driver = Driver(Driver.Config(groups_per_batch=1), [hanging], pool, store, tenant_factory=_factory())
    try:
        with caplog.at_level("WARNING", logger="vlrl.control.driver"):
            batch = one_batch(driver)
        book = driver.book
        assert len(batch.groups) == 1 and book.trained == 1  # the run went on
        assert book.failed == 1 and _balanced(book), book.drift()
        (logged,) = [r.getMessage() for r in caplog.records if "failed; its first failed" in r.getMessage()]
        assert logged.startswith("group a/1 failed") and "EnvHost.step() raised HarnessError" in logged
        assert "releasing harness instance a/1/" in logged and "closing a harness instance" in logged
        assert pool.book.balanced() and pool.book.failed == 2
        assert store.stats().keys == 0
    finally:
        pool.shutdown()
        store.destroy()


def test_a_batch_that_never_fills_stops_the_driver_with_the_reasons(parts):
    pool, store = parts
    never = GroupHook.Config(sampler=PassRateSampler.Config(min_pass_rate=0.9))  # every group passes <= 0.5
    config = Driver.Config(groups_per_batch=1, max_groups_in_flight=2, stall_groups=5)
    driver = Driver(config, [A], pool, store, advantage=never, tenant_factory=_factory())

    async def main():
        try:
            with pytest.raises(DriverStalled, match=r"groups left unaccepted while batch 1 .*rejected: pass rate"):
                await driver.next_batch(policy_version=0)
        finally:
            await driver.close()

    asyncio.run(main())
    book = driver.book
    assert book.accepted == 0 and book.rejected >= 5
    assert _balanced(book) and store.stats().keys == 0


def _staleness_driver(parts, version: list[int], first_turn: list[int | None] | None = None) -> Driver:
    """One group per batch, two batches ahead, a bound of one version; new rollouts are tagged
    ``version[0]`` (and, with ``first_turn[0]`` set, crossed an update from that version)."""
    pool, store = parts
    first_turn = first_turn or [None]
    return Driver(
        Driver.Config(groups_per_batch=1, max_staleness=1, prefetch_batches=2),
        [A],
        pool,
        store,
        tenant_factory=lambda source, seed, group_id, index: StoredTrajectory(
            source, seed, group_id, index, version[0], always_mixed=True, first_turn_version=first_turn[0]
        ),
    )


def test_surplus_groups_that_grow_stale_are_dropped(parts):
    store = parts[1]
    version = [0]  # the policy version new rollouts are tagged with
    driver = _staleness_driver(parts, version)

    async def main():
        first = await driver.next_batch(policy_version=0)
        driver.consumed(first)
        await asyncio.sleep(1.5)  # the prefetched groups (version 0) finish and wait in the buffer
        version[0] = 5  # the trainer moved on past the staleness bound
        second = await driver.next_batch(policy_version=5)
        driver.consumed(second)
        await driver.close()
        return second

    second = asyncio.run(main())
    assert driver.book.stale >= 1 and any(r.startswith("stale: policy version") for r in driver.book.reasons)
    assert all(group.policy_version == 5 for group in second.groups)
    assert _balanced(driver.book) and store.stats().keys == 0


def test_tokens_older_than_the_bound_are_cut_and_counted_and_groups_with_newer_ones_train(parts):
    store = parts[1]
    first_turn = [None]  # set: new episodes crossed a weight update (first turn at version 0)
    version = [0]
    driver = _staleness_driver(parts, version, first_turn)

    async def main():
        first = await driver.next_batch(policy_version=0)
        driver.consumed(first)
        await asyncio.sleep(1.5)  # the prefetched groups (version 0 only) finish and wait in the buffer
        version[0], first_turn[0] = 5, 0
        second = await driver.next_batch(policy_version=5)
        driver.consumed(second)
        await driver.close()
        return second

    second = asyncio.run(main())
    assert second.min_version == 4
    assert all(m.turn_versions == (0, 5) for m in second.sequences)  # half stale, half fresh: trained
    assert driver.book.stale_tokens == 2 * len(second.sequences)  # the version-0 turn of each
    assert driver.book.stale >= 1  # the buffered groups with no token newer than version 0
    assert _balanced(driver.book) and store.stats().keys == 0


def test_a_batch_taken_launches_the_next_groups_while_the_trainer_works(parts):
    """Every group launched is decided before the batch is taken (rollouts outpace training), so
    no group is left to finish and launch the next: taking the batch must, up to the bound."""
    pool, store = parts
    driver = Driver(
        Driver.Config(groups_per_batch=1, prefetch_batches=2),
        [A],
        pool,
        store,
        tenant_factory=lambda source, seed, group_id, index: StoredTrajectory(source, seed, group_id, index, always_mixed=True),
    )

    async def decided(accepted: int) -> None:
        deadline = asyncio.get_running_loop().time() + 60
        while driver.book.accepted < accepted or driver.book.pending:
            assert asyncio.get_running_loop().time() < deadline, driver.book.report()
            await asyncio.sleep(0.05)

    async def main():
        await driver.fill(policy_version=0)  # launched 3 groups (1 + 2 ahead)
        await decided(3)
        assert driver.book.generated == 3, driver.book.report()
        batch = await driver.next_batch(policy_version=0)
        await decided(4)  # "training": no call into the driver until the launched group is decided
        driver.consumed(batch)
        await driver.close()

    asyncio.run(main())
    # One group launched at the take keeps three batches' worth ahead; a fifth would pass the
    # prefetch bound (launched by the fourth as it finished, it would show before all were decided).
    assert driver.book.generated == 4, driver.book.report()
    assert _balanced(driver.book) and store.stats().keys == 0


class LateJudge:
    """Gives every group one winner (so all are informative), after a delay."""

    async def grade(self, metas):
        await asyncio.sleep(0.2)
        return [1.0 if m.sample_index == 0 else 0.0 for m in metas]


def test_late_grader_rewrites_rewards_before_acceptance(parts):
    pool, store = parts
    driver = Driver(
        Driver.Config(groups_per_batch=2, grader=GraderRunner.Config(backoff_s=0)),
        [A],
        pool,
        store,
        # Pass rates from the judge's rewards, not from the harness's success flag.
        advantage=GroupHook.Config(sampler=PassRateSampler.Config(success_from="reward", reward_threshold=0.5)),
        grader=LateJudge(),
        tenant_factory=_factory(),
    )

    batch = one_batch(driver)
    # Groups of even seeds would be rejected on rollout rewards; the judge made them informative.
    assert driver.book.rejected == 0 and driver.book.graded >= 2
    for group in batch.groups:
        assert [m.reward for m in group.metas] == [1.0, 0.0, 0.0, 0.0]
    assert _balanced(driver.book) and store.stats().keys == 0


def test_an_image_shared_by_many_groups_lives_until_the_last_sequence_naming_it_is_deleted(parts):
    """Every trajectory stores the same screenshot: consuming one batch must not take the image
    from groups still buffered or in flight; closing the driver ends it exactly once."""
    from tests.helpers.stored_trajectory import SameScreenTrajectory

    pool, store = parts
    same = lambda source, seed, group_id, index: SameScreenTrajectory(source, seed, group_id, index, 0, True)  # noqa: E731
    driver = Driver(
        Driver.Config(groups_per_batch=1, prefetch_batches=2, max_groups_in_flight=3), [A], pool, store, tenant_factory=same
    )

    async def main():
        first = await driver.next_batch(policy_version=0)
        (image,) = {item.store_key for meta in first.sequences for item in meta.images}
        driver.consumed(first)
        second = await driver.next_batch(policy_version=0)
        assert {item.store_key for meta in second.sequences for item in meta.images} == {image}
        pixels = read_images(store, [image])[image]  # what training fetches
        driver.consumed(second)
        await driver.close()
        return image, pixels

    image, pixels = asyncio.run(main())
    assert (pixels == 7).all()
    assert driver.book.trained == 2 and _balanced(driver.book)
    assert store.contains([image]) == [False] and store.stats().keys == 0


def test_replayed_seeds_launch_first_and_open_seeds_name_what_is_not_trained(parts):
    pool, store = parts
    driver = Driver(
        Driver.Config(groups_per_batch=1, prefetch_batches=1, max_groups_in_flight=2),
        [A],
        pool,
        store,
        tenant_factory=lambda source, seed, group_id, index: StoredTrajectory(source, seed, group_id, index, always_mixed=True),
        seed={"a": 20},
        replay={"a": [9, 7]},
    )

    async def main():
        batch = await driver.next_batch(policy_version=0)
        open_before = driver.seeds.open_seeds()
        driver.consumed(batch)
        open_after = driver.seeds.open_seeds()
        await driver.close()
        return batch, open_before, open_after

    batch, open_before, open_after = asyncio.run(main())
    assert batch.groups[0].group_id in {"a/7", "a/9"}  # the replayed seeds went first, in order
    # Taking the batch launched the next group, on the first new seed: open, not trained.
    assert open_before == {"a": [7, 9, 20]} and driver.seeds.next_seeds == {"a": 21}
    trained = int(batch.groups[0].group_id.split("/")[1])
    assert open_after == {"a": sorted({7, 9, 20} - {trained})}
    assert _balanced(driver.book) and store.stats().keys == 0


@dataclass(frozen=True)
class RareSuccess(StoredTrajectory):
    """Solved once in a group on a task's first play (sample 0), never on a revisit."""

    async def run(self, ctx):
        metas = await super().run(ctx)
        success = self.index == 0 and "~" not in self.group_id
        return [replace(meta, success=success, reward=float(success)) for meta in metas]


def test_a_hard_tasks_success_joins_its_revisits_through_the_real_pool_and_store(parts):
    pool, store = parts
    hard = replace(A, name="hard", replay=Replay(max_pass_rate=0.25, revisits=2))
    driver = Driver(
        Driver.Config(groups_per_batch=1, prefetch_batches=0, max_groups_in_flight=1), [hard], pool, store,
        tenant_factory=lambda source, seed, group_id, index: RareSuccess(source, seed, group_id, index),
    )  # fmt: skip

    async def main():
        batches = []
        for _ in range(3):
            batch = await driver.next_batch(policy_version=0)
            rows = store.get([m.key for m in batch.sequences], ["advantages", "loss_mask"])
            batches.append((batch, rows))
            driver.consumed(batch)
        await driver.close()
        return batches

    batches = asyncio.run(main())
    ids = [batch.groups[0].group_id for batch, _ in batches]
    assert ids == ["hard/0", "hard/0~1", "hard/0~2"]
    kept = batches[0][0].sequences[0].key
    for batch, rows in batches[1:]:
        (copy,) = [m for m in batch.sequences if m.replay_of]
        assert copy.replay_of == kept and copy.success and len(batch.sequences) == 5
        row = rows[copy.key]
        assert (row["advantages"][row["loss_mask"]] > 0).all()  # the one success among five: trained up
    assert driver.replay.book.joined == 2 and driver.replay.book.held == 0
    assert driver.book.trained == 3 and _balanced(driver.book)
    assert store.stats().keys == 0
