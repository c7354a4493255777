"""The driver: schedules rollouts and yields training batches on metadata alone.

It keeps groups of Agent Loops running on the Harness Pool, receives each finished trajectory as
``SeqMeta`` (payloads are in the store), optionally has the group graded asynchronously, runs the
accept-time hook, and buffers accepted groups per data source. A batch is yielded when every
source has contributed its share; surplus groups wait for the next batch unless they grow staler
than ``max_staleness`` policy versions. Rollouts keep running while the trainer works: a group
that finishes, or a batch taken, launches the next, up to ``prefetch_batches`` batches ahead, so rollout, training
and weight sync overlap. An episode in flight across a weight update continues on the new
weights; staleness is bounded per token: a batch names the oldest version it may train
(``Batch.min_version``), the trainer leaves older tokens out of the loss, and the books count
them (``stale_tokens``); a group all of whose tokens are older leaves as stale. The driver owns key lifetimes: rejected, dropped, failed
and stale groups are deleted at once, consumed ones when the trainer is done with them; each
deleted sequence drops its references to its images and to a branch's prefix key (as
``mm.delete_sequences``), so an image key shared by many groups goes with the last sequence that
names it, and a tree root's key with the last of its branches.

Store errors never end the run: the accept-time hook is retried with back-off when the store
fails it (a busy or unreachable shard), and a group it still fails, or whose payload is lost with
a dead shard, leaves as ``failed``; deletions skip a dead shard, since what it held is gone. A
shard restarts empty, so before a batch is yielded its groups' keys and image references are
checked, and a group that lost any leaves as ``failed`` instead of reaching the trainer.

A source with ``replay`` keeps one success of each hard task (a trained group that solved it
rarely) and plays the task again; the kept success joins a revisit that solved nothing
(``control.replay``), and the buffer owns its keys until it deletes them, each for a counted reason.

Books are kept in groups, each term counted from what really happened, never derived from the
others: the outcome counters are bumped where a group leaves, with its reason; ``pending`` is the
number of groups the book holds as open (rolling out, grading, deciding), and the accepted groups
not trained yet are held as buffered, training, or deleted at close. ``DriverBook.drift`` compares
them, ``Driver.books_drift`` also against the driver's own queues: the counts equal the sums of
their reasons, ``generated == accepted + rejected + dropped + failed + stale + pending``, and
``accepted == trained + held``. A counter bumped by mistake is named there. Store troubles that do
not end a group (a failed delete) are ``incidents``, not reasons.

A branching source (``DataSource.branching``) runs ``runs_per_group`` trees per group, each one
tenant (``rollout.branching``); the books count how their branches started (``forks``,
``replays``) and, by reason, the branches that could not (``branch_failures``: a replay that
diverged names its turn). Such a branch is left out; its tree and group go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from ray.exceptions import RayError

from vlrl.config import ConfigError, DataSource, Ge, Gt
from vlrl.config.moved import moved_fields
from vlrl.control.driver_book import DriverBook
from vlrl.control.grader import Grader, GraderRunner
from vlrl.control.group_hook import GroupHook
from vlrl.control.replay import ReplayBuffer
from vlrl.control.task_seeds import TaskSeeds
from vlrl.mm import sequence_refs
from vlrl.pool.budget import split_by_shares
from vlrl.pool.harness_pool import HarnessPool
from vlrl.pool.remote_errors import describe
from vlrl.pool.tenant import Tenant, TenantOutcome, lost_writers
from vlrl.records import AcceptedGroup, Batch, SeqMeta, TreeRollout, group_id_of
from vlrl.store import ShardLostError, StoreError, StoreTimeoutError

log = logging.getLogger(__name__)

STORE_ERRORS = (StoreError, RayError)
"""What the store may raise to the accept-time hook; retried, then the group fails."""

SHARD_ERRORS = (ShardLostError, StoreTimeoutError, RayError)
"""A shard dead or not answering: deletions skip it (other store errors are driver bugs)."""

TenantFactory = Callable[[DataSource, int, str, int], Tenant]
"""Builds the tenant of one trajectory: ``(source, task_seed, group_id, sample_index)``; the
training job passes ``rollout.external.rollout_tenant`` (the Agent Loop, or an external agent program)."""


class DriverStalled(RuntimeError):
    """No batch fills: every finished group leaves unaccepted; the message names why."""


class Driver:
    @dataclass(kw_only=True, slots=True)
    class Config(moved_fields("driver")):
        """Batch shares, staleness and rollout concurrency of the control plane (a recipe's
        ``config.driver.hook``, read or set, is told where the setting lives now)."""

        groups_per_batch: Annotated[int, Ge(1)] = 8
        """Accepted groups per training batch, split among sources by their batch shares."""

        max_staleness: Annotated[int, Ge(0)] = 1
        """Policy versions a token may lag behind the trainer and still be trained: older tokens of a
        batch carry no loss (counted in ``stale_tokens``), and a group with no newer token leaves
        as stale."""

        max_groups_in_flight: Annotated[int, Ge(1)] = 16
        """Groups launched and not yet decided, over all sources: rolling out or waiting on the
        grader, so a slow or hung judge holds back new rollouts instead of letting them pile up."""

        prefetch_batches: Annotated[int, Ge(0)] = 1
        """Batches of groups kept in flight or buffered ahead of the one being filled; taking a batch,
        and a group that finishes while the trainer works, launch the next, so rollouts run
        through training and weight sync (0: only what the current batch needs, rollout and training in turn)."""

        hook_retries: Annotated[int, Ge(0)] = 3
        """Retries of the accept-time hook when a store error fails it, before the group fails."""

        hook_retry_s: Annotated[float, Gt(0)] = 0.1
        """Back-off before the first hook retry; it doubles with each further retry."""

        grader: GraderRunner.Config | None = None
        """Concurrency and retries of the group grader, when one is given to the driver."""

        stall_groups: Annotated[int, Ge(1)] = 256
        """Groups that may leave unaccepted (rejected, dropped, failed, stale) while one batch is
        being filled before the driver stops with ``DriverStalled``: a policy that fails (or
        solves) every task would otherwise roll out forever without a batch."""

        def quotas(self, sources: list[DataSource]) -> dict[str, int]:
            """Groups each source contributes to every batch."""
            quotas = split_by_shares(self.groups_per_batch, {s.name: s.batch_share for s in sources})
            empty = [name for name, quota in quotas.items() if quota == 0]
            if empty:
                raise ConfigError(
                    "groups_per_batch",
                    self.groups_per_batch,
                    f"enough groups that every source gets one by its batch share (none for {empty})",
                )
            return quotas

    def __init__(
        self,
        config: Driver.Config,
        sources: list[DataSource],
        pool: HarnessPool,
        store: Any,
        *,
        advantage: GroupHook.Config | None = None,
        grader: Grader | None = None,
        tenant_factory: TenantFactory,
        seed: int | Mapping[str, int] = 0,
        replay: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        """``advantage``: the accept-time hook's settings (a job's top-level ``advantage`` section;
        the defaults when None). ``seed``: the first task seed of every source, or of each by name.
        ``replay``: seeds of each source to launch first, before new ones: the groups a checkpoint
        left open (``open_seeds``), so that a resumed run trains each of them once."""
        names = [source.name for source in sources]
        if len(set(names)) != len(names):
            raise ConfigError("sources", names, "unique source names")
        advantage = advantage or GroupHook.Config()
        if advantage.mode == "opd" and grader is None:
            raise ConfigError("advantage.mode", "opd", "a teacher scorer given as the driver's grader (control.teacher.TeacherScorer)")
        self.config = config
        self.sources = {source.name: source for source in sources}
        self.quotas = config.quotas(sources)
        self.pool = pool
        self.store = store
        self.hook = advantage.build()
        self.grader = None
        if grader is not None:
            self.grader = (config.grader or GraderRunner.Config()).build(grader)
        self.make_tenant = tenant_factory
        self.book = DriverBook()
        self._buffer: dict[str, deque[AcceptedGroup]] = defaultdict(deque)
        self._in_flight: dict[str, int] = defaultdict(int)
        self._grading: dict[str, int] = defaultdict(int)
        self.seeds = TaskSeeds(self.sources, seed, replay)
        """Task seeds used, and those of groups not trained yet (what a checkpoint records)."""
        self.replay = ReplayBuffer(self.sources, store, self._delete)
        """Hard tasks' kept successes (sources with ``replay``), and their books."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._grading_waiter: asyncio.Task[Any] | None = None
        self._step = 0
        self._version = 0
        self._closing = False
        self._last = False  # the last batch is taken: no group is launched ahead any more
        self._checked_oldest: int | None = None
        """The oldest trainable version every buffered group was last checked against."""

    async def next_batch(self, policy_version: int, *, last: bool = False) -> Batch:
        """Run rollouts until every source has its share of accepted groups, then yield a batch
        (and launch the groups its taking made room for, with ``prefetch_batches``). ``last``: no
        batch follows, so nothing more is launched (close lets the groups in flight, launched ahead
        earlier, finish)."""
        await self.fill(policy_version)
        groups = tuple(self._buffer[name].popleft() for name, quota in self.quotas.items() for _ in range(quota))
        for group in groups:
            self.book.where[group.group_id] = "training"
        self._step += 1
        self._last = last
        if self.config.prefetch_batches and not last:
            # Taking groups makes room ahead: were every launched group already decided, no finishing
            # group would be left to launch the next, and rollouts would stop while the trainer works.
            self._launch()
        return Batch(self._step, groups, min_version=policy_version - self.config.max_staleness)

    async def fill(self, policy_version: int) -> None:
        """Run rollouts until every source has its share of accepted groups buffered, whole (their
        payload checked in the store), for the batch that ``next_batch`` yields next."""
        self._version = policy_version
        left_before = self._left()
        unchecked = 0
        while True:
            self._drop_stale()
            if all(len(self._buffer[name]) >= quota for name, quota in self.quotas.items()):
                lost = self._fail_lost_groups()
                if lost == 0:
                    return
                if lost is None:  # the store did not answer: look again after a pause, a bounded number of times
                    unchecked += 1
                    if unchecked > self.config.hook_retries:
                        raise DriverStalled(f"driver: the store did not answer the batch check {unchecked} times")
                    await asyncio.sleep(self.config.hook_retry_s * 2 ** (unchecked - 1))
                continue  # the next groups in line may be whole; or the failed ones left room to launch
            if self._left() - left_before >= self.config.stall_groups:
                reasons = "; ".join(f"{n} x {r}" for r, n in self.book.reasons.most_common(3))
                raise DriverStalled(
                    f"driver: {self._left() - left_before} groups left unaccepted while batch {self._step + 1}"
                    f" was being filled (most common: {reasons}). A policy that fails every task is rejected"
                    " by the pass-rate sampler: warm-start it, accept all-fail groups"
                    " (advantage.sampler.include_min), or give easier tasks; the bound is driver.stall_groups"
                )
            self._launch()
            await self._wait_for_progress()

    def _fail_lost_groups(self) -> int | None:
        """Fail the groups about to be yielded whose payload is gone (a store shard died and
        restarted empty since they were written), so the trainer never reads a lost key; returns
        how many failed (0: the batch at the head of the buffers is whole), or None when the
        store could not answer (the groups stay buffered for the next look)."""
        head = [group for name, quota in self.quotas.items() for group in list(self._buffer[name])[:quota]]
        keys = [meta.key for group in head for meta in group.metas]
        refs = sequence_refs([meta for group in head for meta in group.metas])
        try:
            present, held = self.store.contains(keys), self.store.holds(refs)
        except SHARD_ERRORS as error:
            self.book.incidents[f"batch check failed: {type(error).__name__}"] += 1
            return None
        lost_keys = {key for key, ok in zip(keys, present) if not ok}
        lost_keys |= {holder for (_, holder), ok in zip(refs, held) if not ok}
        broken = [group for group in head if any(meta.key in lost_keys for meta in group.metas)]
        for group in broken:
            self._buffer[group.source].remove(group)
            self._delete(group.metas, missing_ok=True)
            self.book.accepted -= 1
            self._leave(group.group_id, "failed", "payload lost with a store shard before training")
        return len(broken)

    def _left(self) -> int:
        """Groups that left without being accepted so far."""
        book = self.book
        return book.rejected + book.dropped + book.failed + book.stale

    def requeue(self, batch: Batch) -> None:
        """The trainer could not read ``batch`` (a store shard died under it): its groups go back to
        the front of their buffers, and the next ``next_batch`` fails those that lost payload and
        yields the step again with the rest and fresh groups."""
        for group in reversed(batch.groups):
            self._buffer[group.source].appendleft(group)
            self.book.where[group.group_id] = "buffered"
        self._step -= 1
        self._checked_oldest = None  # the returned groups are checked again

    def consumed(self, batch: Batch) -> None:
        """The trainer is done with ``batch``: delete its keys (and images nobody needs any more),
        but for the successes of hard tasks the replay buffer keeps."""
        kept: set[str] = set()
        for group in batch.groups:
            task = self.seeds.task(group.group_id)
            taken, again = self.replay.trained(task, group.metas)
            kept |= taken
            if again:
                self.seeds.revisit(*task)
            self.seeds.close(group.group_id)
            del self.book.where[group.group_id]
        self._delete([meta for meta in batch.sequences if meta.key not in kept])
        self.book.trained += len(batch.groups)
        if batch.min_version is not None:
            self.book.stale_tokens += sum(meta.stale_tokens(batch.min_version) for meta in batch.sequences)

    async def close(self) -> None:
        """Let rollouts and grading in flight finish (their tenants would otherwise still write),
        then delete every key the driver still holds: nothing outlives the run."""
        self._closing = True  # a group finishing now launches no other
        await asyncio.gather(*self._tasks)
        if self.grader is not None:
            if self._grading_waiter is not None:
                await self._graded(await self._grading_waiter)
                self._grading_waiter = None
            while True:  # results already queued, then those still being graded
                for result in self.grader.ready():
                    await self._graded(result)
                if not self.grader.pending:
                    break
                await self._graded(await self.grader.next_result())
        for buffered in self._buffer.values():
            for group in buffered:
                self._delete(group.metas)
                self.book.where[group.group_id] = "deleted at close"
            buffered.clear()
        self.replay.close()

    # -- rollouts ----------------------------------------------------------------------------

    def _launch(self) -> None:
        """Start groups for sources still short of their share, within the in-flight bound."""
        if self._closing:
            return
        for name, quota in self.quotas.items():
            while (
                self._undecided() < self.config.max_groups_in_flight
                and len(self._buffer[name]) + self._undecided(name) < quota * (1 + self.config.prefetch_batches)
            ):
                self._in_flight[name] += 1
                seed, group_id = self.seeds.start(name)  # booked now: a launched group is open at once
                self.book.generated += 1
                self.book.where[group_id] = "rolling out"
                task = asyncio.get_running_loop().create_task(self._run_group(self.sources[name], seed, group_id))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _run_group(self, source: DataSource, seed: int, group_id: str) -> None:
        await self._play_group(source, seed, group_id)
        if not self._last:
            self._launch()  # keep the pipeline full, even while the trainer works

    async def _play_group(self, source: DataSource, seed: int, group_id: str) -> None:
        try:
            returned = await asyncio.gather(
                *(
                    self.pool.run(
                        self.make_tenant(source, seed, group_id, index),
                        codebase=source.env_pool,
                        env_settings=source.env.as_kwargs(),
                        tenant_id=f"{group_id}/{index}",
                    )
                    for index in range(source.runs_per_group)
                ),
                return_exceptions=True,  # a raising run fails its group, not the driver
            )
        finally:
            self._in_flight[source.name] -= 1
        outcomes = [_as_outcome(f"{group_id}/{index}", value) for index, value in enumerate(returned)]
        self._take_back(lost_writers(outcomes))
        metas = tuple(meta for outcome in outcomes if outcome.status == "ok" for meta in self._sequences(outcome.value))
        failed = [outcome for outcome in outcomes if outcome.status != "ok"]
        if failed:
            self._delete(metas)  # the trajectories that did finish, and their images
            log.warning("group %s failed; its first failed trajectory's error:\n%s", group_id, failed[0].error)
            self._leave(group_id, "failed", _failure_reason(failed))
            return
        metas = self.replay.join((source.name, seed), group_id, metas, self._version)
        if self.grader is not None:
            self.grader.submit(metas)
            self._grading[source.name] += 1
            self.book.where[group_id] = "grading"
        else:
            await self._decide(source.name, metas)

    def _sequences(self, value: list[SeqMeta] | TreeRollout) -> tuple[SeqMeta, ...] | list[SeqMeta]:
        """A run's sequences; a tree's branch books are counted on the way."""
        if not isinstance(value, TreeRollout):
            return value
        self.book.forks += value.forks
        self.book.replays += value.replays
        self.book.branch_failures.update(_reason_kind(reason) for reason in value.failures)
        return value.metas

    def _undecided(self, name: str | None = None) -> int:
        """Groups launched and not decided yet (of one source, or all): rolling out or being graded."""
        names = self.sources if name is None else (name,)
        return sum(self._in_flight[n] + self._grading[n] for n in names)

    async def _wait_for_progress(self) -> None:
        if self.grader is not None:
            finished = self.grader.ready()  # graded while nobody waited (during a training step)
            for result in finished:
                await self._graded(result)
            if finished:
                return
        waiting: set[asyncio.Future[Any]] = set(self._tasks)
        if self.grader is not None and (self.grader.pending or self._grading_waiter is not None):
            if self._grading_waiter is None:
                self._grading_waiter = asyncio.get_running_loop().create_task(self.grader.next_result())
            waiting.add(self._grading_waiter)
        if not waiting:
            raise RuntimeError("driver: no rollout or grading in flight but the batch is not complete")
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is self._grading_waiter:
                self._grading_waiter = None
                await self._graded(task.result())
            else:
                task.result()  # a driver bug inside a group task must surface, not vanish

    async def _graded(self, result: Any) -> None:
        source = result.metas[0].source
        self._grading[source] -= 1
        if not result.ok:
            self._delete(result.metas)
            self._leave(group_id_of(result.metas), "failed", result.error)
            return
        self.book.graded += 1
        await self._decide(source, tuple(result.metas))

    # -- group lifecycle ---------------------------------------------------------------------

    async def _decide(self, source: str, metas: tuple[SeqMeta, ...]) -> None:
        self.book.where[group_id_of(metas)] = "deciding"
        try:
            decision = await self._hook_with_retries(metas)
        except STORE_ERRORS as error:
            self._delete(metas)
            self._leave(group_id_of(metas), "failed", f"accept-time hook: {type(error).__name__}: {str(error).splitlines()[0]}")
            return
        if not decision.accepted:
            self._delete(metas)
            self._leave(decision.group_id, decision.status, decision.reason)
            return
        self.book.accepted += 1
        self.book.where[decision.group_id] = "buffered"
        version = min(meta.policy_version for meta in metas)
        group = AcceptedGroup(decision.group_id, source, metas, decision, version)
        self._buffer[source].append(group)
        if self._checked_oldest is not None and _newest_version(group) < self._checked_oldest:
            self._leave_stale(group, self._checked_oldest)

    def _drop_stale(self) -> None:
        """Drop the buffered groups none of whose tokens is recent enough to train. The buffer is
        scanned only when the oldest trainable version rises; a group buffered in between is
        checked on arrival (``_decide``), so a batch of G groups costs O(G) checks, not a scan of
        the buffer after each finished group (O(G^2): at 4k sequences 364 us a sequence, 15 now;
        ``vlrl bench scale``)."""
        oldest = self._version - self.config.max_staleness
        if oldest == self._checked_oldest:
            return
        for buffered in list(self._buffer.values()):
            for group in [g for g in buffered if _newest_version(g) < oldest]:
                self._leave_stale(group, oldest)
        self._checked_oldest = oldest

    def _leave_stale(self, group: AcceptedGroup, oldest: int) -> None:
        self._buffer[group.source].remove(group)
        self._delete(group.metas)
        self.book.accepted -= 1
        newest = _newest_version(group)
        self._leave(group.group_id, "stale", f"policy version {newest} (its newest) older than {oldest}")

    async def _hook_with_retries(self, metas: tuple[SeqMeta, ...]) -> Any:
        """The hook's decision; a store error is retried with doubling back-off, a lost shard is not."""
        for attempt in range(self.config.hook_retries + 1):
            try:
                return self.hook(metas, self.store)
            except STORE_ERRORS as error:
                if isinstance(error, ShardLostError) or attempt == self.config.hook_retries:
                    raise
                await asyncio.sleep(self.config.hook_retry_s * 2**attempt)

    def _delete(self, metas: tuple[SeqMeta, ...] | list[SeqMeta], *, missing_ok: bool = False) -> None:
        """Delete sequences and drop their image references (as ``mm.delete_sequences``). A store
        error in this clean-up is counted as an incident, never raised: a dead shard's keys are
        gone with it and every live shard still deletes or releases its own; a key or reference
        that is not there (taken back, or never written) is skipped and the rest still go."""
        if not metas:
            return
        keys = [meta.key for meta in metas if not meta.prefix_shared]  # a key its branches hold goes with them
        try:
            self.store.delete(keys, missing_ok=missing_ok)
        except STORE_ERRORS as error:
            self.book.incidents[f"delete failed: {type(error).__name__}"] += 1
            with contextlib.suppress(*STORE_ERRORS):
                self.store.delete(keys, missing_ok=True)
        refs = sequence_refs(metas)
        try:
            self.store.release(refs)
        except STORE_ERRORS as error:  # a refused release changed nothing; a shard's error came after the rest
            self.book.incidents[f"release failed: {type(error).__name__}"] += 1
            if not isinstance(error, SHARD_ERRORS):
                with contextlib.suppress(*STORE_ERRORS):
                    self.store.release_held(refs)

    def _take_back(self, writers: list[str]) -> None:
        """Undo what runs wrote before their loop host died (nobody else can)."""
        if not writers:
            return
        try:
            self.store.take_back(writers)
        except SHARD_ERRORS as error:  # every live shard took back its part before the error came back
            self.book.incidents[f"take back failed: {type(error).__name__}"] += 1

    def _leave(self, group_id: str, status: str, reason: str) -> None:
        self.replay.untrained(self.seeds.task(group_id), status)
        self.seeds.close(group_id)
        setattr(self.book, status, getattr(self.book, status) + 1)
        self.book.reasons[f"{status}: {_reason_kind(reason)}"] += 1
        del self.book.where[group_id]

    def books_drift(self) -> list[str]:
        """``DriverBook.drift``, and where the book's places disagree with the driver's own queues
        (groups in flight, being graded, buffered); [] when the books are exact."""
        problems = self.book.drift()
        places = Counter(self.book.where.values())
        actual = {
            "rolling out": sum(self._in_flight.values()),
            "grading": sum(self._grading.values()),
            "buffered": sum(len(buffered) for buffered in self._buffer.values()),
        }
        for place, count in actual.items():
            if places[place] != count:
                problems.append(f"pending: the book holds {places[place]} group(s) {place}, the driver {count}")
        return problems


def _newest_version(group: AcceptedGroup) -> int:
    return max(meta.newest_version for meta in group.metas)


def _as_outcome(tenant_id: str, returned: TenantOutcome | BaseException) -> TenantOutcome:
    """A run's outcome; an error ``pool.run`` raised becomes a failed one that names it."""
    if isinstance(returned, BaseException):
        if not isinstance(returned, Exception):  # cancellation, KeyboardInterrupt: not the group's failure
            raise returned
        return TenantOutcome(tenant_id, "failed", error=f"pool.run raised {describe(returned)}")
    return returned


def _failure_reason(failed: list[TenantOutcome]) -> str:
    first = failed[0]
    return f"{len(failed)} trajectory(ies) {first.status}: {(first.error or '').splitlines()[0] if first.error else ''}"


def _reason_kind(reason: str) -> str:
    """A reason without its numbers, so that counts group by kind ('pass rate above max')."""
    return " ".join(word for word in reason.split() if not any(ch.isdigit() for ch in word))[:80]
