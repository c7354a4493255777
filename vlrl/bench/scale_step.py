"""One batch size of ``vlrl bench scale``: RL steps of N sequences through the real control plane.

A fresh ``Driver`` per size, on the bench's pool, store and cluster, with the stand-in tenants
and judge of ``scale_standins``; the batch is ``N / GROUP_SIZE`` groups of one source, at most
``in_flight`` sequences rolling out at once (the engines' capacity). Each step:

1. ``driver.next_batch``: groups launched on the loop hosts, trajectories finished into the
   store, graded, passed through the accept-time hook, the batch checked whole;
2. the micro-batch plan of the batch for ``LAYOUT`` (metadata only);
3. every TP group's packer publishes each of its micro-batches' windows (then unlinks them), as
   the trainer's packers would, from this process;
4. ``driver.consumed``: the batch's keys and image references released.

Stages of the driver's thread are charged by ``scale_meter.StageClock`` (``launch``: the pool
run of a trajectory in the driver, leasing, submitting, taking its outcome back; ``grading``:
the grader runner and the driver's follow-up; ``hook``; ``yield_planning``: the buffer's
staleness scan, the batch check and the plan; ``packing``; ``release``); ``finish`` is charged on the loop hosts
(``scale_standins.FINISH``). Process figures come from ``/proc`` around each step: the driver
(step 2's plan included, step 3's packing left out: packers are the trainer's processes), each
store shard, the loop hosts, the raylets and the GCS.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import ray

from vlrl.bench.driver_runs import store_shard_pids
from vlrl.bench.proc_memory import memory_mb
from vlrl.bench.scale_cluster import SimulatedCluster
from vlrl.bench.scale_meter import GcClock, StageClock, metered_call, metered_coroutine, process_figures
from vlrl.bench.scale_standins import LatencyModel, StandInEpisode, StandInJudge, finish_figures
from vlrl.config import DataSource
from vlrl.control.driver import Driver
from vlrl.control.driver_book import OUTCOMES
from vlrl.control.grader import GraderRunner
from vlrl.pack import Layout, MicroBatchPlanner, TPGroupPacker, shared
from vlrl.pool import HarnessPool
from vlrl.records import fields_for

GROUP_SIZE = 8
LAYOUT = Layout(8, 1, 2)
"""DP x CP x TP of the simulated trainer: 8 TP groups, each with its packer."""
MICRO_BATCH_TOKENS = 65536
PACKED = fields_for({"policy_gradient"})
"""What the packers cut: the policy-gradient fields (the window adds the routing record, an
``extra/`` field every sequence names)."""
DRIVER_STAGES = ("launch", "grading", "hook", "yield_planning", "packing", "release")
OUTCOME_SAMPLE = 8
"""Every this-many-th trajectory's tenant and outcome are pickled to count the bytes they move."""


@dataclass(frozen=True, slots=True)
class Parts:
    """What every size runs on: the cluster, the pool, the store and its config."""

    cluster: SimulatedCluster
    pool: HarnessPool
    store: Any
    store_config: Any


class MeteredPool:
    """The pool as the driver sees it, each trajectory's run charged to ``launch``; a sample of
    tenants and outcomes is pickled (outside any stage) to count the bytes they cross Ray with."""

    def __init__(self, pool: HarnessPool, clock: StageClock) -> None:
        self._pool, self._clock = pool, clock
        self.runs = 0
        self.sampled = 0
        self.sampled_bytes = 0

    async def run(self, tenant: Any, **kwargs: Any) -> Any:
        outcome = await metered_coroutine(self._clock, "launch", self._pool.run(tenant, **kwargs))
        self.runs += 1
        if self.runs % OUTCOME_SAMPLE == 0:
            self.sampled += 1
            self.sampled_bytes += len(ray.cloudpickle.dumps(tenant)) + len(ray.cloudpickle.dumps(outcome))
        return outcome


class HookBytes:
    """The accept-time hook, charged to ``hook``, with the payload bytes it moves counted."""

    def __init__(self, hook: Any, store: Any, clock: StageClock) -> None:
        self._hook, self._store = metered_call(clock, "hook", hook), store
        self.bytes = 0

    def __call__(self, metas: Any, store: Any) -> Any:
        before = self._store.io_stats()
        try:
            return self._hook(metas, store)
        finally:
            after = self._store.io_stats()
            self.bytes += after.bytes_read + after.bytes_written - before.bytes_read - before.bytes_written


def build_driver(
    parts: Parts, sequences: int, in_flight: int, latency: LatencyModel, clock: StageClock, seed: int, rescan: bool
) -> tuple[Driver, MeteredPool, HookBytes]:
    """A driver for batches of ``sequences``, its parts metered on ``clock``. ``rescan``: the
    driver as it was before its staleness check was made incremental, scanning the whole buffer
    after every finished group (it forgets the bound it checked before each scan)."""
    groups = sequences // GROUP_SIZE
    source = DataSource(name="scale", codebase="desktop", group_size=GROUP_SIZE)
    config = Driver.Config(
        groups_per_batch=groups,
        max_groups_in_flight=max(1, min(groups, in_flight // GROUP_SIZE)),
        prefetch_batches=0,
        grader=GraderRunner.Config(max_concurrency=64, timeout_s=120.0),
    )
    pool = MeteredPool(parts.pool, clock)

    def tenant(source: DataSource, task_seed: int, group_id: str, index: int) -> StandInEpisode:
        return StandInEpisode(source.name, task_seed, group_id, index, latency)

    driver = Driver(config, [source], pool, parts.store, grader=StandInJudge(), tenant_factory=tenant, seed=seed)
    hook = HookBytes(driver.hook, parts.store, clock)
    driver.hook = hook
    runner = driver.grader
    runner.submit = metered_call(clock, "grading", runner.submit)
    grade = runner.grade
    runner.grade = lambda metas: metered_coroutine(clock, "grading", grade(metas))
    graded = driver._graded
    driver._graded = lambda result: metered_coroutine(clock, "grading", graded(result))
    scan = driver._drop_stale

    def rescanning() -> None:
        driver._checked_oldest = None
        scan()

    driver._drop_stale = metered_call(clock, "yield_planning", rescanning if rescan else scan)
    driver._fail_lost_groups = metered_call(clock, "yield_planning", driver._fail_lost_groups)
    return driver, pool, hook


def _others(parts: Parts) -> dict[str, list[int]]:
    loop_pids = ray.get([host.pid.remote() for host in parts.pool.loop.hosts()])
    return {
        "store_shards": store_shard_pids(parts.store_config),
        "loop_hosts": loop_pids,
        "raylets": list(parts.cluster.raylet_pids),
        "gcs": [parts.cluster.gcs_pid],
    }


def _processes(pids: dict[str, list[int]]) -> dict[str, list[dict[str, float]]]:
    return {role: [process_figures(pid) for pid in role_pids] for role, role_pids in pids.items()}


def _finish_totals(parts: Parts) -> dict[str, float]:
    per_host = [finish_figures(host) for host in parts.pool.loop.hosts()]
    return {k: sum(h[k] for h in per_host) for k in ("sequences", "cpu_s", "wall_s", "bytes_written")}


def _pack(parts: Parts, batch: Any, plan: Any) -> int:
    """Every TP group's windows, published and unlinked; returns the windows cut."""
    windows = 0
    for leader in range(0, LAYOUT.world_size, LAYOUT.tp):
        packer = TPGroupPacker.Config().build(
            store=parts.store, layout=LAYOUT, plan=plan, metas=batch.sequences,
            group_ranks=LAYOUT.tp_group(leader), fields=PACKED,
        )  # fmt: skip
        for i in range(len(plan.ranks[packer.dp_rank])):
            shared.unlink(packer.publish(i).segment)
            windows += 1
    return windows


async def _step(parts: Parts, driver: Driver, clock: StageClock, pids: dict[str, list[int]]) -> dict[str, Any]:
    """One RL step's figures (seconds and bytes in all; the caller divides by sequences)."""
    planner = MicroBatchPlanner.Config(max_tokens_per_micro_batch=MICRO_BATCH_TOKENS).build()
    clock_before, finish_before = clock.snapshot(), _finish_totals(parts)
    others_before = _processes(pids)
    me_before, thread_before, started = process_figures(os.getpid()), time.thread_time(), time.perf_counter()
    with GcClock() as collector:
        batch = await driver.next_batch(0)
    rollout_wall = time.perf_counter() - started
    with clock.stage("yield_planning"):
        plan = planner.plan(batch.sequences, LAYOUT.dp)
    me_mid, thread_mid, mid = process_figures(os.getpid()), time.thread_time(), time.perf_counter()
    io_before = parts.store.io_stats()
    with clock.stage("packing"):
        windows = _pack(parts, batch, plan)
    io_after = parts.store.io_stats()
    me_packed, thread_packed, packed = process_figures(os.getpid()), time.thread_time(), time.perf_counter()
    with clock.stage("release"):
        driver.consumed(batch)
    me_after, thread_after, ended = process_figures(os.getpid()), time.thread_time(), time.perf_counter()
    others_after = _processes(pids)
    clock_after, finish_after = clock.snapshot(), _finish_totals(parts)
    stages = {
        s: {k: clock_after.get(s, {}).get(k, 0.0) - clock_before.get(s, {}).get(k, 0.0) for k in ("cpu_s", "wall_s")}
        for s in DRIVER_STAGES
    }
    stages["finish"] = {k: finish_after[k] - finish_before[k] for k in ("cpu_s", "wall_s")}
    not_packing = lambda after, mid_, packed_, before: (after - packed_) + (mid_ - before)  # noqa: E731
    return {
        "sequences": len(batch.sequences),
        "finished": finish_after["sequences"] - finish_before["sequences"],
        "tokens": sum(m.num_tokens for m in batch.sequences),
        "windows": windows,
        "stages": stages,
        "bytes": {
            "finish": finish_after["bytes_written"] - finish_before["bytes_written"],
            "packing": io_after.bytes_read - io_before.bytes_read,
        },
        "driver": {
            "cpu_s": not_packing(me_after["cpu_s"], me_mid["cpu_s"], me_packed["cpu_s"], me_before["cpu_s"]),
            "thread_cpu_s": not_packing(thread_after, thread_mid, thread_packed, thread_before),
            "wall_s": not_packing(ended, mid, packed, started),
            "rollout_wall_s": rollout_wall,
            "gc_s": sum(collector.seconds),
            "gc_full_s": collector.seconds[2],
            "gc_full_collections": collector.collections[2],
            "rss_mb": me_after["rss_mb"],
        },
        "processes": {
            role: {
                "cpu_s": sum(a["cpu_s"] - b["cpu_s"] for a, b in zip(others_after[role], others_before[role])),
                "rss_mb": [round(a["rss_mb"], 1) for a in others_after[role]],
                "fds": [a["fds"] for a in others_after[role]],
            }
            for role in others_after
        },
    }


async def measure_size(
    parts: Parts, sequences: int, steps: int, *, in_flight: int, latency: LatencyModel, seed: int, rescan: bool = False
) -> dict[str, Any]:
    """``steps`` RL steps of ``sequences`` sequences on a fresh driver; every step's figures, the
    driver's books, and the store's keys after the driver closed. Every size runs on one event
    loop (the pool's host leases are bound to the loop that first used them)."""
    clock = StageClock()
    driver, pool, hook = build_driver(parts, sequences, in_flight, latency, clock, seed, rescan)
    pids = _others(parts)
    rss_before = memory_mb()["rss_mb"]
    per_step = []
    for _ in range(steps):
        hook_before = hook.bytes
        figures = await _step(parts, driver, clock, pids)
        figures["bytes"]["hook"] = hook.bytes - hook_before
        per_step.append(figures)
    await driver.close()
    book = driver.book
    return {
        "sequences": sequences,
        "groups": sequences // GROUP_SIZE,
        "steps": per_step,
        "driver_rss_increase_mb": memory_mb()["rss_mb"] - rss_before,
        "launch_bytes_per_sequence": pool.sampled_bytes / max(1, pool.sampled),
        "launch_bytes_sampled": pool.sampled,
        "books": {k: getattr(book, k) for k in ("generated", "accepted", *OUTCOMES, "trained")},
        "books_drift": driver.books_drift(),
        "keys_left": parts.store.stats().keys,
    }
