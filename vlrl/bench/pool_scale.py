"""``vlrl bench pool``'s scale sweep: N concurrent Pillow-desktop episodes, each on its own harness
instance, on the pool's four hosts against one Ray actor per episode, at growing N.

Both schemes play the same episodes (seed i, random clicks drawn from ``random.Random(i)``, at
most ``MAX_STEPS`` steps) all started together. One actor per rollout starts its actors in
batches and stops before the machine's memory would end (``RESERVE_GIB`` kept free for everyone
else, the next batch's need estimated from the memory the actors so far took) or where Ray
refuses; that point is reported, and larger N are not tried for it. Figures per point: Ray
processes and their peak RSS, the GCS's descriptors, memory per instance (the PSS of all Ray
processes once every episode has played, its instances still held, over N: RSS would count the
libraries N processes share N times), episodes/s once started, start-up, and for the pool the
harness instances its env hosts held (warm ones are reused, so it is the most that were open at
once). Each point starts once the previous point's processes have exited.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import ray

from vlrl.bench.proc_memory import memory_mb, tree_memory_mb
from vlrl.bench.ray_sampler import RaySampler, ray_processes
from vlrl.harness import Action, resolve
from vlrl.pool import HarnessPool, HostBudget, HostConfig, ScriptedEpisode

CODEBASE = "desktop"
MAX_STEPS = 20
SETTINGS = {"max_steps": MAX_STEPS}
RESERVE_GIB = 4.0
"""Memory the sweep leaves free for the machine: it stops one actor per rollout before this."""
BATCH = 16
"""Per-rollout actors started between two memory checks."""


def play_desktop(seed: int) -> int:
    """Episode ``seed`` of the desktop played in this thread with the scripted episode's random
    clicks; returns the steps it took."""
    harness = resolve(CODEBASE)(**SETTINGS)
    obs, _ = harness.reset(seed=seed)
    rng, steps, done = random.Random(seed), 0, False
    while not done and steps < MAX_STEPS:
        obs, _, terminated, truncated, _ = harness.step(Action.click(rng.randrange(obs.width), rng.randrange(obs.height)))
        steps += 1
        done = terminated or truncated
    harness.close()
    return steps


@ray.remote(num_cpus=0)
class DesktopActor:
    """One actor per rollout: it plays its one episode in its own process."""

    def ready(self) -> bool:
        return True

    def run(self, seed: int) -> int:
        return play_desktop(seed)


def available_gib() -> float:
    """The machine's ``MemAvailable``."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024**2
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def pool_point(n: int) -> dict[str, Any]:
    half = (n + 1) // 2 + 8  # two hosts of each kind; the pool places evenly
    config = HarnessPool.Config(
        budget=HostBudget(total_hosts=4, shares={"loop": 1, CODEBASE: 1}),
        loop_host=HostConfig(max_tenants=half),
        env_host=HostConfig(max_tenants=half, threads=16),
    )
    with RaySampler() as sampler:
        started = time.perf_counter()
        pool = config.build()
        startup = time.perf_counter() - started
        episodes = [ScriptedEpisode(seed=i, policy="random", max_steps=MAX_STEPS) for i in range(n)]
        started = time.perf_counter()
        outcomes = asyncio.run(pool.run_many([(e, {"codebase": CODEBASE, "env_settings": SETTINGS}) for e in episodes]))
        wall = time.perf_counter() - started
        instances = sum(ray.get([host.instances.remote() for host in pool.envs[CODEBASE].hosts()]))
        held = ray_pss_mb()
        pool.shutdown()
    failed = [o for o in outcomes if o.status != "ok"]
    if failed:
        raise RuntimeError(f"pool scale sweep at N = {n}: {len(failed)} episodes failed, first: {failed[0].error}")
    return {
        "instances": instances,
        "steps_played": sum(o.value.steps for o in outcomes),
        "startup_s": startup,
        **_figures(n, wall, held, sampler),
    }


def per_rollout_point(n: int) -> dict[str, Any]:
    actors: list[Any] = []
    stopped = None
    with RaySampler() as sampler:
        started = time.perf_counter()
        free_before = available_gib()
        while len(actors) < n:
            free = available_gib()
            per_actor = (free_before - free) / len(actors) if actors else 0.15
            need = per_actor * min(BATCH, n - len(actors))
            if free - need < RESERVE_GIB:
                stopped = (
                    f"machine memory: {len(actors)} actors up, {free:.1f} GiB available, the next"
                    f" {min(BATCH, n - len(actors))} need about {need:.1f} GiB and {RESERVE_GIB:g} GiB are kept free"
                )
                break
            batch = [DesktopActor.remote() for _ in range(min(BATCH, n - len(actors)))]
            try:
                ray.get([actor.ready.remote() for actor in batch])
            except Exception as error:  # Ray's own limit (workers, descriptors, the GCS)
                stopped = f"{len(actors)} actors up, the next batch failed: {type(error).__name__}: {error}"[:300]
                actors += batch
                break
            actors += batch
        startup = time.perf_counter() - started
        if stopped is None:
            started = time.perf_counter()
            steps = sum(ray.get([actor.run.remote(seed) for seed, actor in enumerate(actors)]))
            wall = time.perf_counter() - started
            held = ray_pss_mb()
        for actor in actors:
            ray.kill(actor)
    if stopped is not None:
        return {"stopped": stopped, "actors_started": len(actors), "startup_s": startup, "rss_mb": sampler.peak["rss_mb"]}
    return {"steps_played": steps, "startup_s": startup, **_figures(n, wall, held, sampler)}


def ray_pss_mb() -> float:
    """PSS of every Ray process this process started (its descendants)."""
    return tree_memory_mb([os.getpid()]) - memory_mb()["pss_mb"]


def _figures(n: int, wall: float, pss_mb: float, sampler: RaySampler) -> dict[str, Any]:
    peak = sampler.peak
    return {
        "processes": peak["processes"],
        "gcs_fds": peak["gcs_fds"],
        "rss_mb": peak["rss_mb"],
        "pss_mb": pss_mb,
        "pss_mb_per_instance": pss_mb / n,
        "episodes_per_s": n / wall,
    }


def _settle(processes: int, timeout_s: float = 120.0) -> None:
    """Wait until Ray's processes are back to ``processes`` (killed actors take a while to exit),
    so one point's leftovers are not counted in the next."""
    deadline = time.monotonic() + timeout_s
    while ray_processes()["processes"] > processes and time.monotonic() < deadline:
        time.sleep(0.5)


def scale_sweep(points: tuple[int, ...]) -> list[dict[str, Any]]:
    """Each N of ``points``: the pool's figures and one actor per rollout's, or where it stopped."""
    out: list[dict[str, Any]] = []
    stopped_at = None
    idle = ray_processes()["processes"]
    for n in points:
        point: dict[str, Any] = {"episodes": n, "pool": pool_point(n)}
        _settle(idle)
        if stopped_at is None:
            point["per_rollout"] = per_rollout_point(n)
            _settle(idle)
            if "stopped" in point["per_rollout"]:
                stopped_at = n
        else:
            point["per_rollout"] = {"stopped": f"not tried: it stopped at N = {stopped_at}"}
        out.append(point)
    return out
