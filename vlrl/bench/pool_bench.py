"""``vlrl bench pool``: the Harness Pool against one Ray actor per rollout, and threads against
blocking on the event loop.

Workload: N concurrent episodes of a harness whose every step does blocking I/O (a sleep, as a
browser or a remote desktop would) and CPU work (PNG-encoding its screenshot). Runs:

- (a) the pool with K hosts at N, and again at 8 x N;
- (b) one Ray actor per rollout at N (the largest N this machine survives comfortably);
- (c) the pool at N with harness calls made on the host's event loop instead of threads.

Figures: Ray actors and processes created, file descriptors held by the GCS server and by all Ray
processes (read from /proc, peak while running), peak memory of all Ray processes, episodes/s.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import ray

from vlrl.harness import Action, Harness, HarnessError, Observation, StepResult, register
from vlrl.mm import encode_image
from vlrl.pool import HarnessPool, HostBudget, HostConfig, ScriptedEpisode

SIZES = {"small": {"n": 24, "steps": 4}, "full": {"n": 48, "steps": 6}}
IO_S = 0.05
SCREEN = (240, 320)


class WorkloadHarness(Harness):
    """Each step blocks on I/O for ``IO_S`` and PNG-encodes a fresh screenshot (CPU)."""

    tasks = ("steps",)

    def __init__(self, *, steps: int = 4) -> None:
        self._steps = steps
        self._left: int | None = None
        self._rng = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict]:
        if (options or {}).get("task", "steps") != "steps":
            raise HarnessError(f"unknown task {options['task']!r}; expected 'steps'")
        self._rng = np.random.default_rng(seed)
        self._left = self._steps
        return self._observe(), {"task": "steps"}

    def step(self, action: Action) -> StepResult:
        if self._left is None:
            raise HarnessError("step before reset, or after the episode ended")
        action.check_bounds(SCREEN[1], SCREEN[0])
        time.sleep(IO_S)
        self._left -= 1
        done = self._left == 0 or action.kind in ("done", "fail")
        success = self._left == 0
        if done:
            self._left = None
        return self._observe(), float(success), done, False, {"task": "steps", "success": success}

    def oracle(self) -> Action:
        return Action.click(10, 10)

    def close(self) -> None:
        self._left = None

    def _observe(self) -> Observation:
        pixels = self._rng.integers(0, 256, (*SCREEN, 3), dtype=np.uint8)
        encode_image(pixels, "png")  # the CPU half of a step
        return Observation(screenshot=pixels, goal="take the steps")


register("bench-workload", WorkloadHarness)


@ray.remote(num_cpus=0)
class RolloutActor:
    """The per-rollout baseline: a dedicated process for a single episode."""

    def run(self, seed: int, steps: int) -> tuple[float, int]:
        harness = WorkloadHarness(steps=steps)
        harness.reset(seed=seed)
        reward, done = 0.0, False
        while not done:
            _, r, done, _, _ = harness.step(harness.oracle())
            reward += r
        harness.close()
        return reward, os.getpid()


class RaySampler:
    """Samples descriptors and memory of Ray's processes from /proc while a run goes on."""

    def __init__(self, period_s: float = 0.2) -> None:
        self._period = period_s
        self._stop = threading.Event()
        self.peak = {"gcs_fds": 0, "total_fds": 0, "rss_mb": 0.0, "processes": 0}
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RaySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            sample = ray_processes()
            for key, value in sample.items():
                self.peak[key] = max(self.peak[key], value)
            self._stop.wait(self._period)


def ray_processes() -> dict[str, float]:
    """Descriptors, memory and count of the Ray processes this process started (its GCS, raylet
    and workers: its descendants), so another Ray on the machine is never counted."""
    status: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                status[int(proc.name)] = (proc / "status").read_text()
            except (FileNotFoundError, PermissionError, ProcessLookupError):
                continue
    children: dict[int, list[int]] = defaultdict(list)
    for pid, text in status.items():
        children[next((int(line.split()[1]) for line in text.splitlines() if line.startswith("PPid:")), 0)].append(pid)
    gcs_fds = total_fds = processes = rss = 0
    stack = list(children[os.getpid()])
    while stack:
        pid = stack.pop()
        stack.extend(children[pid])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        rss += next((int(line.split()[1]) for line in status[pid].splitlines() if line.startswith("VmRSS:")), 0)
        total_fds += fds
        processes += 1
        if cmdline[0].endswith(b"gcs_server"):
            gcs_fds = fds
    return {"gcs_fds": gcs_fds, "total_fds": total_fds, "rss_mb": rss / 1024, "processes": processes}


def _run_pool(n: int, steps: int, total_hosts: int, on_threads: bool) -> dict[str, Any]:
    env_host = HostConfig(max_tenants=max(64, n), threads=16, blocking_on_threads=on_threads)
    config = HarnessPool.Config(
        budget=HostBudget(total_hosts=total_hosts, shares={"loop": 1, "bench-workload": 1}),
        loop_host=HostConfig(max_tenants=max(64, n)),
        env_host=env_host,
    )
    with RaySampler() as sampler:
        pool = config.build()
        started = time.perf_counter()
        jobs = [(ScriptedEpisode(seed=i), {"codebase": "bench-workload", "env_settings": {"steps": steps}}) for i in range(n)]
        outcomes = asyncio.run(pool.run_many(jobs))
        elapsed = time.perf_counter() - started
        hosts = pool.loop.hosts() + [h for env in pool.envs.values() for h in env.hosts()]
        pids = set(ray.get([host.pid.remote() for host in hosts]))
        pool.shutdown()
    time.sleep(2.0)  # let the hosts' processes exit before the next run is sampled
    failed = [o for o in outcomes if o.status != "ok"]
    if failed:
        raise RuntimeError(f"pool benchmark: {len(failed)} episodes failed, first: {failed[0].error}")
    return {
        "episodes": n,
        "actors": len(hosts),
        "processes": len(pids),
        **{k: sampler.peak[k] for k in ("gcs_fds", "total_fds", "rss_mb")},
        "episodes_per_s": n / elapsed,
    }


def _run_per_rollout(n: int, steps: int) -> dict[str, Any]:
    with RaySampler() as sampler:
        started = time.perf_counter()
        actors = [RolloutActor.remote() for _ in range(n)]
        results = ray.get([actor.run.remote(seed, steps) for seed, actor in enumerate(actors)])
        elapsed = time.perf_counter() - started
        for actor in actors:
            ray.kill(actor)
    time.sleep(2.0)  # let the killed actors' processes exit before the next run is sampled
    return {
        "episodes": n,
        "actors": len(actors),
        "processes": len({pid for _, pid in results}),
        **{k: sampler.peak[k] for k in ("gcs_fds", "total_fds", "rss_mb")},
        "episodes_per_s": n / elapsed,
    }


def run(size: str) -> dict[str, Any]:
    n, steps = SIZES[size]["n"], SIZES[size]["steps"]
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=4, include_dashboard=False, object_store_memory=1024**3, log_to_driver=False)
    try:
        idle = ray_processes()
        per_rollout = _run_per_rollout(n, steps)
        pool = _run_pool(n, steps, total_hosts=4, on_threads=True)
        pool_8x = _run_pool(8 * n, steps, total_hosts=4, on_threads=True)
        on_loop = _run_pool(n, steps, total_hosts=4, on_threads=False)
    finally:
        if started_ray:
            ray.shutdown()
    return {
        "workload": {"episodes": n, "steps": steps, "io_s_per_step": IO_S, "screen": f"{SCREEN[1]}x{SCREEN[0]}"},
        "idle_gcs_fds": idle["gcs_fds"],
        "pool": pool,
        "pool_8x": pool_8x,
        "per_rollout": per_rollout,
        "pool_on_loop": on_loop,
        "actors_pool": pool["actors"],
        "actors_per_rollout": per_rollout["actors"],
        "gcs_fds_pool": pool["gcs_fds"],
        "gcs_fds_pool_8x": pool_8x["gcs_fds"],
        "gcs_fds_per_rollout": per_rollout["gcs_fds"],
        "throughput_ratio": pool["episodes_per_s"] / per_rollout["episodes_per_s"],
        "thread_offload_ratio": pool["episodes_per_s"] / on_loop["episodes_per_s"],
    }
