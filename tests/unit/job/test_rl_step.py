"""One RL step (``train_job.rl_step``) on in-process parts: a real driver and store, a pool whose
episodes are written straight to the store, a trainer that records what it was given.

The training job and ``vlrl bench chaos`` run the same step: the same steps on identical parts
leave the same trainer calls, weight pushes, books and store keys, so a bench that grew its own
copy of the step (a missing ``consumed``, another version pushed or trained from) fails here.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np

from vlrl.bench import chaos_bench
from vlrl.config import DataSource, EnvSettings
from vlrl.control.driver import Driver
from vlrl.job.meters import CostMeter, staleness_histogram
from vlrl.job.session import RunState
from vlrl.job.rl_step import rl_step
from vlrl.job.train_job import TrainJob
from vlrl.pool.tenant import TenantOutcome
from vlrl.records import SeqMeta
from vlrl.store.local import LocalStore

SOURCE = DataSource(name="click", codebase="none", group_size=2, env=EnvSettings())
PROMPT, TOKENS = 4, 10


class Engines:
    """The policy version the episodes are sampled by: what the last weight push set."""

    version = 0


class Store(LocalStore):
    """The run's store, counting the driver's deletions: the first is the first batch consumed."""

    def __init__(self) -> None:
        super().__init__(image_tile_px=None)
        self.deletions = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def delete(self, keys: Any, **kwargs: Any) -> None:
        super().delete(keys, **kwargs)
        self.deletions += 1
        for n, waiter in self._waiters:
            if n <= self.deletions and not waiter.done():
                waiter.set_result(None)

    def end(self) -> None:
        """The run ends: episodes waiting on a batch nobody will consume finish now."""
        self.deletions = 1 << 30
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def deleted(self, n: int) -> None:
        """Return once ``n`` deletions happened (on the event loop: no clock involved)."""
        if self.deletions < n:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append((n, waiter))
            await waiter


class EpisodePool:
    """Plays each episode by writing its payload to the store (sample 0 succeeds, 1 fails: every
    group is mixed and accepted), stamped with the version the engines serve when it finishes.
    Rollouts are slower than training: the groups of batch ``b`` (task seeds ``2b``, ``2b + 1``),
    launched ahead while batch ``b - 1`` trains, finish only once batch ``b - 1`` is consumed. So
    nothing finishes while the trainer works, and the steps are the same on every machine."""

    def __init__(self, store: Store, engines: Engines) -> None:
        self.store, self.engines = store, engines

    async def run(self, tenant: tuple[int, str, int], *, tenant_id: str, **_: Any) -> TenantOutcome:
        seed, group_id, index = tenant
        await asyncio.sleep(0)  # an episode takes a turn of the event loop
        await self.store.deleted(seed // 2)
        key = f"seq/{group_id}/{index}"
        self.store.put(key, {
            "token_ids": np.arange(TOKENS, dtype=np.int32),
            "logprobs": np.full(TOKENS, -0.5, dtype=np.float32),
            "loss_mask": np.arange(TOKENS) >= PROMPT,
        })  # fmt: skip
        meta = SeqMeta(
            key=key, group_id=group_id, source=SOURCE.name, sample_index=index, reward=float(index == 0),
            success=index == 0, finish="done", turns=1, num_tokens=TOKENS, num_response_tokens=TOKENS - PROMPT,
            context_lengths=(PROMPT,), policy_version=self.engines.version,
        )  # fmt: skip
        return TenantOutcome(tenant_id, "ok", value=[meta])


class RecordingTrainer:
    """A trainer group that records each step's keys and oldest trained version, after checking
    that every key it was given is in the store with its advantages."""

    def __init__(self, store: LocalStore, calls: list[Any]) -> None:
        self.store, self.calls = store, calls

    def step(self, sequences: list[SeqMeta], min_version: int | None, policy_version: int | None = None) -> dict[str, float]:
        keys = sorted(m.key for m in sequences)
        self.store.get(keys, fields=["advantages"])  # raises for a missing key or field
        self.calls.append(("step", keys, min_version))
        return {"loss": 0.0, "tokens_per_s": 1.0}


class Session:
    """What the step and the job read of a ``JobSession``."""

    def __init__(self) -> None:
        self.store = Store()
        self.engines = Engines()
        self.calls: list[Any] = []
        self.meter = SimpleNamespace(take=dict)
        self.records: list[dict[str, Any]] = []
        self.log = SimpleNamespace(log=lambda step, phase, record: self.records.append(record))
        self.progress = SimpleNamespace(advance=lambda **kwargs: None)

    async def push_weights(self, group: RecordingTrainer, version: int) -> None:
        left = sum(self.store.contains([key for _, keys, _ in self.calls[-1:] for key in keys]))
        self.calls.append(("push", version, f"{left} trained keys left"))
        self.engines.version = version

    async def weight_pause_s(self) -> float:
        return 0.0

    def store_metrics(self) -> dict[str, float]:
        return {}


def parts(**driver: Any) -> tuple[Session, Driver, RecordingTrainer]:
    s = Session()
    config = Driver.Config(groups_per_batch=2, max_staleness=1, prefetch_batches=1, **driver)
    factory = lambda source, seed, group_id, index: (seed, group_id, index)  # noqa: E731
    d = Driver(config, [SOURCE], EpisodePool(s.store, s.engines), s.store, tenant_factory=factory, seed=0)
    return s, d, RecordingTrainer(s.store, s.calls)


async def closed(s: Session, driver: Driver) -> dict[str, Any]:
    """What the steps left: the trainer calls and pushes, the books, and, the driver closed, the
    keys in the store."""
    book = driver.book.report()
    s.store.end()  # the groups launched ahead for a step that never comes
    await driver.close()
    return {"calls": s.calls, "book": book, "keys_after_close": s.store.stats().keys}


def test_a_step_trains_its_batch_then_deletes_its_keys_then_pushes_the_next_version():
    s, driver, trainer = parts()

    async def main() -> Any:
        done = await rl_step(s, driver, trainer, 0)
        return done, await closed(s, driver)

    done, left = asyncio.run(main())
    keys = sorted(m.key for m in done.batch.sequences)
    assert len(done.batch.groups) == 2 and done.metrics["loss"] == 0.0
    assert left["calls"] == [("step", keys, -1), ("push", 1, "0 trained keys left")]
    assert left["book"]["trained"] == 2
    assert left["keys_after_close"] == 0


def test_the_last_step_launches_no_rollouts_for_a_step_that_never_comes():
    """Taking a batch launches the groups it made room for, but not on the run's last step: close
    would wait for those episodes and delete them unplayed by any trainer."""

    def generated(last: bool) -> int:
        s, driver, trainer = parts()

        async def main() -> int:
            await rl_step(s, driver, trainer, 0, last=last)
            launched = driver.book.generated
            await closed(s, driver)
            return launched

        return asyncio.run(main())

    # Batch 0's two groups and the two launched ahead of it; a step that is not the last launches
    # two more as it takes its batch.
    assert (generated(last=True), generated(last=False)) == (4, 6)


def test_the_chaos_bench_runs_the_jobs_step():
    """``vlrl bench chaos``'s loop and the training job's loop, on identical parts, train the same
    keys from the same versions, push the same versions, and leave the same books and store."""
    steps = 3
    bench_s, bench_driver, bench_trainer = parts()
    job_s, job_driver, job_trainer = parts()
    job = TrainJob(SimpleNamespace(eval=SimpleNamespace(every=0), steps=steps))

    async def bench() -> dict[str, Any]:
        out = {"books_exact": True}
        await chaos_bench.run_steps(bench_s, bench_driver, bench_trainer, steps, out)
        assert out["books_exact"]
        return await closed(bench_s, bench_driver)

    async def train() -> dict[str, Any]:
        state, costs = RunState(), CostMeter([], job_s.store)  # no engine replicas here: the store's bytes only
        for _ in range(steps):
            await job._rl_step(job_s, state, job_driver, job_trainer, costs)
        assert (state.step, state.version) == (steps, steps)
        return await closed(job_s, job_driver)

    ran_by_bench, ran_by_job = asyncio.run(bench()), asyncio.run(train())
    assert ran_by_bench == ran_by_job
    pushes = [call[1] for call in ran_by_job["calls"] if call[0] == "push"]
    assert pushes == [1, 2, 3] and ran_by_job["book"]["trained"] == 2 * steps


def test_a_held_push_makes_the_next_batch_one_version_stale():
    """``hold_push``: the push waits for the next batch, so all of it was sampled by the version
    the step trained from (what ``vlrl bench async`` at smoke size checks, on any machine). The
    episodes here take the version the engines serve when they finish."""
    s, driver, trainer = parts()

    async def main() -> Any:
        await rl_step(s, driver, trainer, 0, hold_push=True)
        second = await rl_step(s, driver, trainer, 1)
        s.store.end()
        await driver.close()
        return second.batch

    batch = asyncio.run(main())
    assert staleness_histogram(batch, 1) == {1: 2 * 2 * (TOKENS - PROMPT)}  # 2 groups of 2, all sampled by version 0


def test_the_job_holds_only_its_first_push_when_asked():
    """``TrainJob(hold_first_push=True)``, as ``vlrl bench async`` at smoke size runs it: the
    second step's logged staleness is all one version (the figure the bench reads)."""
    s, driver, trainer = parts()
    job = TrainJob(SimpleNamespace(eval=SimpleNamespace(every=0), steps=2), hold_first_push=True)

    async def main() -> None:
        state, costs = RunState(), CostMeter([], s.store)
        for _ in range(2):
            await job._rl_step(s, state, driver, trainer, costs)
        s.store.end()
        await driver.close()

    asyncio.run(main())
    lags = [{k: v for k, v in record.items() if k.startswith("batch/tokens_lag")} for record in s.records]
    assert lags[1] == {"batch/tokens_lag1": 2 * 2 * (TOKENS - PROMPT)}
