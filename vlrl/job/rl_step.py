"""One RL step, the same for ``vlrl train`` and the benchmarks that run the job's loop
(``vlrl bench chaos`` under faults, ``vlrl bench async`` through the job): a batch from the
driver, one optimizer step on it, its keys deleted, the new weights pushed to the engines; and
the one way that loop's driver is built (``rl_driver``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vlrl.control.driver import Driver
from vlrl.control.grader import Grader
from vlrl.control.teacher import TeacherScorer
from vlrl.job.session import JobSession
from vlrl.records import Batch
from vlrl.rollout.external import rollout_tenant
from vlrl.rollout.teacher_engine import EngineTeacher
from vlrl.train.trainer import StepInputsLost
from vlrl.train.trainer_group import TrainerGroup

STEP_INPUT_RETRIES = 3
"""Times one RL step is run again on other groups when the trainer could not read its payload."""


def rl_driver(
    s: JobSession,
    *,
    seed: int | Mapping[str, int] = 0,
    replay: Mapping[str, Sequence[int]] | None = None,
    grader: Grader | None = None,
    pool: Any = None,
    store: Any = None,
) -> Driver:
    """The RL stage's driver on session ``s``: the recipe's ``driver``, ``sources`` and
    ``advantage`` settings, every trajectory's tenant from ``rollout_tenant`` (the Agent Loop, or a
    source's own agent program), the session's metered pool and store, and under OPD the
    teacher's scorer as grader. ``seed`` and ``replay``: ``Driver``'s. ``grader``, ``pool`` and
    ``store`` stand in for the session's own (``vlrl bench chaos``: a judge that can hang, a pool
    and a store that fail on cue), so a bench drives the job's tenants through the job's driver."""
    config = s.config
    if grader is None and s.teacher is not None:
        grader = TeacherScorer(EngineTeacher(s.teacher), s.store)
    return Driver(
        config.driver, config.sources, s.meter if pool is None else pool, s.store if store is None else store,
        advantage=config.advantage, grader=grader, tenant_factory=rollout_tenant, seed=seed, replay=replay,
    )  # fmt: skip


async def train_on(
    batch: Batch, driver: Driver, group: TrainerGroup, version: int, *, last: bool = False
) -> tuple[Batch, dict[str, float]]:
    """One optimizer step on ``batch``. When the trainer could not read its payload (a store shard
    died under it; no gradient was computed), the batch goes back to the driver, which fails the
    groups that lost keys and yields the step again; returns the batch trained on and its metrics."""
    retries = 0
    while True:
        try:
            return batch, await asyncio.to_thread(group.step, batch.sequences, batch.min_version, version)
        except StepInputsLost:
            retries += 1
            if retries > STEP_INPUT_RETRIES:
                raise
            driver.requeue(batch)
            batch = await driver.next_batch(version, last=last)


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one ``rl_step`` trained, and where its time went."""

    batch: Batch
    """The batch trained on (its keys are deleted)."""
    metrics: dict[str, float]
    """The trainer's figures (``loss``, ``tokens_per_s``, ...)."""
    rollout_wait_s: float
    """Waiting for the batch's rollouts."""
    train_s: float
    """The optimizer step and the deletion of the batch's keys (with ``hold_push``, also the wait
    for the next batch)."""
    weight_sync_s: float
    """The weight push to the engines (the trainer's wait for it)."""


async def rl_step(
    s: JobSession, driver: Driver, group: TrainerGroup, version: int, *, hold_push: bool = False, last: bool = False
) -> StepResult:
    """One RL step on policy ``version``: a batch from ``driver``, one optimizer step of ``group``
    on it, its keys deleted, the new weights pushed to the session's engines as ``version + 1``.

    ``hold_push``: the push waits until the driver holds the next batch, so every token of that
    batch was sampled by ``version`` or older and is trained one version stale or more (what
    ``vlrl bench async`` at smoke size checks its staleness books on, whatever the machine's speed).
    ``last``: the run's last step: taking its batch refills nothing (the groups launched earlier
    for the batch after it still play, and close waits for them).
    """
    t0 = time.perf_counter()
    batch = await driver.next_batch(version, last=last)
    t1 = time.perf_counter()
    batch, metrics = await train_on(batch, driver, group, version, last=last)
    driver.consumed(batch)
    if hold_push and not last:
        await driver.fill(version)
    t2 = time.perf_counter()
    await s.push_weights(group, version + 1)
    t3 = time.perf_counter()
    return StepResult(batch, metrics, rollout_wait_s=t1 - t0, train_s=t2 - t1, weight_sync_s=t3 - t2)

