"""``vlrl bench pool``: the Harness Pool against one Ray actor per rollout, and threads against
harness calls one at a time.

Workload: N concurrent episodes of a harness whose every step does blocking I/O (a sleep of a
lognormal latency, median 30 ms, as a browser or a remote desktop would; ``smoke``: 100 ms) and
CPU work (PNG-encoding its screenshot, a GUI window whose one panel changes per step); each
episode takes 15 to 50 steps, drawn from its seed (``--size small``: 15 to 30; ``smoke``: 12
episodes of 4 to 8, one repetition). Every scheme plays the same episodes with the same policy,
random clicks (one env call per step, as an RL Agent Loop makes; ``steps_played`` counts them).
Runs:

- (a) the pool with K hosts at N, and again at 8 x N;
- (b) one Ray actor per rollout at N, the actors started and ready before the timer (their
  start-up is reported on its own, ``per_rollout_startup_s``);
- (c) a fixed pool of K plain actors (``ray.util.ActorPool``, the shape of a framework's fixed
  agent-loop workers), each running one episode at a time, started before the timer;
- (d) the pool at N with its env hosts' harness calls made one at a time instead of side by side
  on threads;
- (e) ``sweep``: the pool against one actor per rollout at growing N of concurrent Pillow-desktop
  episodes (64, 256, 1,024; ``smoke``: 8, 16), until the per-rollout actors fail or the machine's
  memory would end (``pool_scale``).

(a) at N and 8 x N, (b), (c) and (d) are repeated ``runs`` times in rotated order: episodes/s as
min / median / max, ratios of medians (the sweep's points are single runs, for their scale).
Figures: Ray actors and processes created, file descriptors held by the GCS server and by all
Ray processes (read from /proc, peak while running), peak memory of all Ray processes, episodes/s,
and core-ms per step: the CPU every process of the run (this driver less its /proc sampler, Ray's
GCS, raylet and workers) computed while it played, over the steps it played. Of that, the
harness's own work is the same in every scheme (``harness_core_ms_per_step``, measured by playing
the episodes in this thread); the rest is each scheme's overhead. ``ray_hop`` is what one Ray call
costs that does nothing but what a pool's step call does (block the env host's Ray thread): part of the
pool's overhead on every step, which a step played inside its own actor never pays (not measured
at ``smoke``, which keeps to the schemes).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from vlrl.bench.pool_scale import scale_sweep
from vlrl.bench.process_cpu import cpu_between, tree_cpu
from vlrl.bench.ray_sampler import RaySampler, ray_processes
from vlrl.bench.spread import spread
from vlrl.harness import Action, Harness, HarnessError, Observation, StepResult, register
from vlrl.mm import encode_image
from vlrl.pool import HarnessPool, HostBudget, HostConfig, ScriptedEpisode

SIZES = {
    "smoke": {"n": 12, "steps": (4, 8), "io_median_s": 0.1, "runs": 1, "sweep": (8, 16), "hop_calls": 0},
    "small": {"n": 24, "steps": (15, 30), "io_median_s": 0.03, "runs": 5, "sweep": (64, 256, 1024), "hop_calls": 20},
    "full": {"n": 48, "steps": (15, 50), "io_median_s": 0.03, "runs": 5, "sweep": (64, 256, 1024), "hop_calls": 20},
}
SCREEN = (240, 320)


class WorkloadHarness(Harness):
    """Each step blocks on I/O for a lognormal latency and PNG-encodes its screenshot (CPU); an
    episode takes ``min_steps`` to ``max_steps`` steps, drawn from its seed; the latency's median
    is ``io_median_s``. Screens look like a GUI's: an episode keeps one window (title bar, panels
    and buttons drawn from its seed) and each step changes one panel's content, as a click does."""

    tasks = ("steps",)

    def __init__(self, *, min_steps: int = 15, max_steps: int = 50, io_median_s: float = 0.03) -> None:
        self._steps = (min_steps, max_steps)
        self._io_median_s = io_median_s
        self._left: int | None = None
        self._rng = np.random.default_rng(0)
        self._window = np.zeros((*SCREEN, 3), np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict]:
        if (options or {}).get("task", "steps") != "steps":
            raise HarnessError(f"unknown task {options['task']!r}; expected 'steps'")
        self._rng = np.random.default_rng(seed)
        self._left = int(self._rng.integers(self._steps[0], self._steps[1] + 1))
        self._window = gui_window(self._rng)
        return self._observe(), {"task": "steps"}

    def step(self, action: Action) -> StepResult:
        if self._left is None:
            raise HarnessError("step before reset, or after the episode ended")
        action.check_bounds(SCREEN[1], SCREEN[0])
        median = self._io_median_s
        time.sleep(float(np.clip(self._rng.lognormal(np.log(median), 0.5), median / 6, median * 10)))
        self._left -= 1
        done = self._left == 0 or action.kind in ("done", "fail")
        success = self._left == 0
        if done:
            self._left = None
        return self._observe(), float(success), done, False, {"task": "steps", "success": success}

    def close(self) -> None:
        self._left = None

    def _observe(self) -> Observation:
        pixels = self._window.copy()
        top, left = PANELS[int(self._rng.integers(len(PANELS)))]
        pixels[top : top + 48, left : left + 96] = self._rng.integers(0, 256, (48, 96, 3), dtype=np.uint8)
        encode_image(pixels, "png")  # the CPU half of a step
        return Observation(screenshot=pixels, goal="take the steps")


PANELS = ((40, 16), (40, 208), (120, 16), (120, 112), (180, 208))
"""Top-left corners of the window's content panels (48 x 96 each)."""


def gui_window(rng: np.random.Generator) -> np.ndarray:
    """A ``SCREEN`` of a GUI window: light background, a dark title bar, panels and a row of buttons."""
    window = np.full((*SCREEN, 3), 236, np.uint8)
    window[:24] = rng.integers(20, 90, 3, dtype=np.uint8)
    for top, left in PANELS:
        window[top : top + 48, left : left + 96] = 250
    for i in range(5):
        window[216:232, 16 + 60 * i : 64 + 60 * i] = rng.integers(60, 200, 3, dtype=np.uint8)
    return window


def random_click(rng: random.Random) -> Action:
    """The policy of every scheme: a click anywhere on the screen (one env call per step, as an
    RL Agent Loop whose actions come from the model makes)."""
    return Action.click(rng.randrange(SCREEN[1]), rng.randrange(SCREEN[0]))


register("bench-workload", WorkloadHarness)


@ray.remote(num_cpus=0)
class RolloutActor:
    """A plain actor that plays one episode per call: one per rollout, or a fixed set of them."""

    def ready(self) -> int:
        return os.getpid()

    def run(self, seed: int, workload: dict[str, Any]) -> int:
        """Play episode ``seed``; returns the steps it took."""
        return play_alone(seed, workload)


def play_alone(seed: int, workload: dict[str, Any]) -> int:
    """Episode ``seed`` played in this thread, no Ray call in it; returns the steps it took."""
    harness = WorkloadHarness(**workload)
    harness.reset(seed=seed)
    rng, steps, done = random.Random(seed), 0, False
    while not done:
        _, _, done, _, _ = harness.step(random_click(rng))
        steps += 1
    harness.close()
    return steps


def harness_core_ms(n: int, workload: dict[str, Any]) -> float:
    """Core-ms per step of the harness's own work (drawing and PNG-encoding screens), the same in
    every scheme: the N episodes played in this thread, their I/O waits cut to nothing (a wait
    takes no CPU; the same seeds draw the same screens and lengths)."""
    started = time.thread_time()
    steps = sum(play_alone(seed, {**workload, "io_median_s": 1e-6}) for seed in range(n))
    return 1e3 * (time.thread_time() - started) / steps


def _run_pool(n: int, workload: dict[str, Any], total_hosts: int, on_threads: bool) -> dict[str, Any]:
    env_host = HostConfig(max_tenants=max(64, n), threads=16, blocking_on_threads=on_threads)
    config = HarnessPool.Config(
        budget=HostBudget(total_hosts=total_hosts, shares={"loop": 1, "bench-workload": 1}),
        loop_host=HostConfig(max_tenants=max(64, n)),
        env_host=env_host,
    )
    with RaySampler() as sampler:
        pool = config.build()
        hosts = {"loop_host": pool.loop.hosts(), "env_host": [h for env in pool.envs.values() for h in env.hosts()]}
        pids = {role: set(ray.get([host.pid.remote() for host in group])) for role, group in hosts.items()}
        cpu = SectionCpu(sampler)
        episodes = [ScriptedEpisode(seed=i, policy="random", max_steps=workload["max_steps"]) for i in range(n)]
        jobs = [(episode, {"codebase": "bench-workload", "env_settings": workload}) for episode in episodes]
        outcomes = asyncio.run(pool.run_many(jobs))
        used = cpu.end()
        pool.shutdown()
    time.sleep(2.0)  # let the hosts' processes exit before the next run is sampled
    failed = [o for o in outcomes if o.status != "ok"]
    if failed:
        raise RuntimeError(f"pool benchmark: {len(failed)} episodes failed, first: {failed[0].error}")
    steps = sum(o.value.steps for o in outcomes)
    return {
        "episodes": n,
        "steps_played": steps,
        "actors": sum(len(group) for group in hosts.values()),
        "processes": len(pids["loop_host"] | pids["env_host"]),
        **{k: sampler.peak[k] for k in ("gcs_fds", "total_fds", "rss_mb")},
        "episodes_per_s": n / used.wall_s,
        **used.core_ms_per_step(steps, pids),
    }


def _run_per_rollout(n: int, workload: dict[str, Any]) -> dict[str, Any]:
    with RaySampler() as sampler:
        started = time.perf_counter()
        actors = [RolloutActor.remote() for _ in range(n)]
        pids = ray.get([actor.ready.remote() for actor in actors])
        startup = time.perf_counter() - started
        cpu = SectionCpu(sampler)
        steps = ray.get([actor.run.remote(seed, workload) for seed, actor in enumerate(actors)])
        used = cpu.end()
        for actor in actors:
            ray.kill(actor)
    time.sleep(2.0)  # let the killed actors' processes exit before the next run is sampled
    return {
        "episodes": n,
        "steps_played": sum(steps),
        "actors": len(actors),
        "processes": len(set(pids)),
        **{k: sampler.peak[k] for k in ("gcs_fds", "total_fds", "rss_mb")},
        "startup_s": startup,
        "episodes_per_s": n / used.wall_s,
        **used.core_ms_per_step(sum(steps), {"actor": set(pids)}),
    }


def _run_actor_pool(n: int, workload: dict[str, Any], actors: int) -> dict[str, Any]:
    from ray.util import ActorPool

    with RaySampler() as sampler:
        workers = [RolloutActor.remote() for _ in range(actors)]
        pids = ray.get([worker.ready.remote() for worker in workers])
        cpu = SectionCpu(sampler)
        steps = list(ActorPool(workers).map_unordered(lambda worker, seed: worker.run.remote(seed, workload), range(n)))
        used = cpu.end()
        for worker in workers:
            ray.kill(worker)
    time.sleep(2.0)
    return {
        "episodes": n,
        "steps_played": sum(steps),
        "actors": actors,
        "processes": len(set(pids)),
        **{k: sampler.peak[k] for k in ("gcs_fds", "total_fds", "rss_mb")},
        "episodes_per_s": n / used.wall_s,
        **used.core_ms_per_step(sum(steps), {"actor": set(pids)}),
    }


class SectionCpu:
    """Wall time and the CPU of every process of the run (``process_cpu.tree_cpu``) from now to
    ``end()``; the driver's share leaves out its /proc sampler."""

    def __init__(self, sampler: RaySampler) -> None:
        self._sampler = sampler
        self._sampler_cpu_s = sampler.cpu_s
        self._before = tree_cpu()
        self._started = time.perf_counter()

    def end(self) -> SectionUsage:
        wall_s = time.perf_counter() - self._started
        used = cpu_between(self._before, tree_cpu())
        used[os.getpid()] -= self._sampler.cpu_s - self._sampler_cpu_s
        return SectionUsage(wall_s, used)


@dataclass(frozen=True, slots=True)
class SectionUsage:
    wall_s: float
    cpu_s: dict[int, float]
    """CPU seconds by pid."""

    def core_ms_per_step(self, steps: int, roles: dict[str, set[int]]) -> dict[str, float]:
        """``core_ms_per_step`` of every process, and ``<role>_core_ms_per_step`` of each role's processes."""
        out = {"core_ms_per_step": 1e3 * sum(self.cpu_s.values()) / steps}
        for role, pids in roles.items():
            out[f"{role}_core_ms_per_step"] = 1e3 * sum(self.cpu_s.get(pid, 0.0) for pid in pids) / steps
        return out


@ray.remote(num_cpus=0)
class HopCaller:
    """The caller's end of a bare step call: ``play`` awaits ``wait`` on a ``HopCallee``, as a
    loop host's tenant awaits its env host's ``step``."""

    async def pid(self) -> int:
        return os.getpid()

    async def play(self, other: Any, loops: int, calls: int, seconds: float) -> None:
        async def loop() -> None:
            for _ in range(calls):
                await other.wait.remote(seconds)

        await asyncio.gather(*(loop() for _ in range(loops)))


@ray.remote(num_cpus=0)
class HopCallee:
    """The callee's end: a threaded actor whose ``wait`` blocks the Ray thread that took it, as an
    env host's harness call does. What the two processes compute per call is the Ray hop alone,
    no harness, no screen."""

    def pid(self) -> int:
        return os.getpid()

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)


def _ray_hop(loops: int, calls: int, io_median_s: float) -> dict[str, float]:
    """Core-ms per call of ``loops`` concurrent loops of ``calls`` bare step calls each."""
    caller, callee = HopCaller.remote(), HopCallee.options(max_concurrency=loops + 16).remote()
    pids = set(ray.get([caller.pid.remote(), callee.pid.remote()]))
    ray.get(caller.play.remote(callee, loops, 2, 0.0))  # both ends warm
    before = tree_cpu()
    ray.get(caller.play.remote(callee, loops, calls, io_median_s))
    used = cpu_between(before, tree_cpu())
    for actor in (caller, callee):
        ray.kill(actor)
    return {"core_ms_per_call": 1e3 * sum(used[pid] for pid in pids) / (loops * calls), "calls": loops * calls}


def run(size: str) -> dict[str, Any]:
    n, steps, runs = SIZES[size]["n"], SIZES[size]["steps"], SIZES[size]["runs"]
    workload = {"min_steps": steps[0], "max_steps": steps[1], "io_median_s": SIZES[size]["io_median_s"]}
    hosts = 4
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=4, include_dashboard=False, object_store_memory=1024**3, log_to_driver=False)
    try:
        idle = ray_processes()
        schemes = {
            "pool": lambda: _run_pool(n, workload, total_hosts=hosts, on_threads=True),
            "per_rollout": lambda: _run_per_rollout(n, workload),
            "actor_pool": lambda: _run_actor_pool(n, workload, actors=hosts),
            "pool_on_loop": lambda: _run_pool(n, workload, total_hosts=hosts, on_threads=False),
            "pool_8x": lambda: _run_pool(8 * n, workload, total_hosts=hosts, on_threads=True),
        }
        measured: dict[str, list[dict]] = {name: [] for name in schemes}
        for rep in range(runs):
            names = list(schemes)
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                measured[name].append(schemes[name]())
        sweep = scale_sweep(SIZES[size]["sweep"])
        hop = _ray_hop(n, SIZES[size]["hop_calls"], workload["io_median_s"]) if SIZES[size]["hop_calls"] else None
        harness = harness_core_ms(n, workload)
    finally:
        if started_ray:
            ray.shutdown()
    rate = {name: spread([r["episodes_per_s"] for r in results]) for name, results in measured.items()}
    with_startup = spread([n / (r["startup_s"] + n / r["episodes_per_s"]) for r in measured["per_rollout"]])
    pool, per_rollout, actor_pool, on_loop, pool_8x = (
        {**results[0], **{k: spread([r[k] for r in results]) for k in results[0] if k.endswith("core_ms_per_step")}}
        for results in measured.values()
    )
    core_ms = {name: results["core_ms_per_step"]["median"] for name, results in zip(schemes, (pool, per_rollout))}
    return {
        "workload": {
            "episodes": n, "steps": list(steps), "io_median_s": workload["io_median_s"], "screen": f"{SCREEN[1]}x{SCREEN[0]}"
        },
        "idle_gcs_fds": idle["gcs_fds"],
        "pool": {**pool, "episodes_per_s": rate["pool"]},
        "pool_8x": {**pool_8x, "episodes_per_s": rate["pool_8x"]},
        "per_rollout": {**per_rollout, "episodes_per_s": rate["per_rollout"], "episodes_per_s_with_startup": with_startup},
        "actor_pool": {**actor_pool, "episodes_per_s": rate["actor_pool"]},
        "pool_on_loop": {**on_loop, "episodes_per_s": rate["pool_on_loop"]},
        "sweep": sweep,
        "actors_pool": pool["actors"],
        "actors_per_rollout": per_rollout["actors"],
        "gcs_fds_pool": pool["gcs_fds"],
        "gcs_fds_pool_8x": pool_8x["gcs_fds"],
        "gcs_fds_per_rollout": per_rollout["gcs_fds"],
        "per_rollout_startup_s": spread([r["startup_s"] for r in measured["per_rollout"]]),
        "throughput_ratio": rate["pool"]["median"] / rate["per_rollout"]["median"],
        "throughput_ratio_with_startup": rate["pool"]["median"] / with_startup["median"],
        "throughput_ratio_vs_actor_pool": rate["pool"]["median"] / rate["actor_pool"]["median"],
        "thread_offload_ratio": rate["pool"]["median"] / rate["pool_on_loop"]["median"],
        "core_ms_ratio": core_ms["pool"] / core_ms["per_rollout"],
        "harness_core_ms_per_step": harness,
        "overhead_core_ms_per_step": {name: value - harness for name, value in core_ms.items()},
        "ray_hop": hop,
        "ray_hop_share": hop["core_ms_per_call"] / core_ms["per_rollout"] if hop else None,
    }
