"""``vlrl bench async``: synchronous and asynchronous RL side by side, on the main job's loop.

Every run starts from one warm start (the main job's, run once here; ``smoke`` starts from the
recipe's untrained model) and trains the same steps on the same task seeds; only the driver
differs:

- ``sync``: ``prefetch_batches=0``, ``max_staleness=0``. A batch's rollouts all finish, then the
  step trains, then the weights go to the engine; no rollout runs meanwhile, so a step costs its
  slowest episode plus training plus weight sync, one after the other.
- ``async``: ``prefetch_batches=1``, ``max_staleness=2``. Rollouts keep running through training
  and weight sync (a finished group, or a batch taken, launches the next); an episode in flight
  at a weight update continues on the new weights, its turns recording their versions; tokens
  more than two versions old are cut from the loss and counted.

Two configurations: ``main`` (the main job's click-target episodes: one turn) and ``long``
(click-target episodes of up to 15 turns on a desktop whose every reset and step takes a
lognormal time, median 1 s, as a real application's I/O does; every group is trained, since
with fifteen tries most groups pass whole, so ``long`` measures throughput and staleness, and its
success stays near the warm start's). Each run reports
``step_s`` (``time/step_s`` of its RL steps, ``{min, median, max}``) and its parts
(``TIME_PARTS``, each ``{min, median, max}``), ``rl_wall_s``, the
staleness histogram (generated tokens trained by how many versions their sampling policy lagged)
and the held-out success at the end (the job's final evaluation), and the machine's busy CPU
seconds over the RL steps (``cpu_busy_s``, ``cpu_utilization`` of all cores; ``CpuMeter``).
Per configuration: ``speedup`` (sync over async RL wall time), ``speedup_bound`` (one over the
synchronous run's utilization: what overlap could gain at most on this machine, were the
asynchronous run to keep every core busy with the same work), ``success_sync``, ``success_async``.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from harnesses.desktop.harness import DesktopHarness
from vlrl.bench.cpu_meter import CpuMeter
from vlrl.bench.spread import spread
from vlrl.harness import register

SIZES = {
    "smoke": {
        "steps": 2, "warm_steps": 0, "warm_episodes": 0, "eval_episodes": 1, "configs": ("long",),
        "turns": 2, "group_size": 2, "groups_per_batch": 2, "hold_first_push": True, "env_hosts": 1,
    },
    "small": {
        "steps": 3, "warm_steps": 20, "warm_episodes": 64, "eval_episodes": 8, "configs": ("long",),
        "turns": 6, "group_size": 4, "groups_per_batch": 4, "hold_first_push": False, "env_hosts": 2,
    },
    "full": {
        "steps": 20, "warm_steps": 250, "warm_episodes": 512, "eval_episodes": 200, "configs": ("main", "long"),
        "turns": 15, "group_size": 8, "groups_per_batch": 8, "hold_first_push": False, "env_hosts": 2,
    },
}  # fmt: skip
"""``hold_first_push``: the asynchronous run's first weight push waits until its next batch is
rolled out (``TrainJob(hold_first_push=True)``), so that batch is trained one version stale
whatever the machine's speed: the smoke run checks the staleness books, it measures nothing
(two steps: the second trains the batch rolled out before the first push; two-turn episodes,
so that an episode could span an update).
``warm_steps`` 0: no warm start, every run starts from the recipe's own model. ``env_hosts``: the
``long`` configuration's desktop hosts (beside one loop host)."""
LATENCY_MEDIAN_S = 1.0
LATENCY_SIGMA = 0.8
MAIN_RECIPE = Path(__file__).resolve().parents[2] / "examples" / "train_click.py"
TIME_PARTS = ("rollout_wait_s", "train_s", "weight_sync_s", "weight_pause_s")
"""Where each step's time went (the job's ``time/*`` metrics): waiting for the batch, training,
the trainer's wait for the weight push, and the longest a replica held requests back for it."""
MODES = {
    "sync": {"prefetch_batches": 0, "max_staleness": 0},
    "async": {"prefetch_batches": 1, "max_staleness": 2},
}


class LatencyDesktop(DesktopHarness):
    """The desktop harness with a lognormal delay on every reset and step, drawn from the episode
    seed (the same delays in every run): what a real application's I/O costs."""

    def __init__(self, *, latency_median_s: float = LATENCY_MEDIAN_S, latency_sigma: float = LATENCY_SIGMA, **settings):
        super().__init__(**settings)
        self._median, self._sigma = latency_median_s, latency_sigma
        self._rng = random.Random(0)

    def reset(self, *, seed=None, options=None):
        self._rng = random.Random(seed)
        self._wait()
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self._wait()
        return super().step(action)

    def _wait(self) -> None:
        time.sleep(self._median * self._rng.lognormvariate(0.0, self._sigma))


register("desktop-latency", "vlrl.bench.async_bench:LatencyDesktop")


def run(size: str = "small") -> dict[str, Any]:
    shape = SIZES[size]
    with tempfile.TemporaryDirectory(prefix="vlrl-bench-async-") as folder:
        root = Path(folder)
        policy = _warm_start(root, shape) if shape["warm_steps"] else None
        configs: dict[str, Any] = {}
        for name in shape["configs"]:
            runs = {mode: _train(root / f"{name}-{mode}", name, mode, policy, shape) for mode in MODES}
            configs[name] = {
                **runs,
                "speedup": runs["sync"]["rl_wall_s"] / runs["async"]["rl_wall_s"],
                "speedup_bound": 1 / runs["sync"]["cpu_utilization"],
                "success_sync": runs["sync"]["success"],
                "success_async": runs["async"]["success"],
            }
    return {"steps": shape["steps"], "configs": configs}


def _recipe(run_dir: Path, shape: dict[str, Any]):
    from vlrl.config import load_recipe

    if not MAIN_RECIPE.exists():
        raise FileNotFoundError(f"vlrl bench async runs the main job's recipe {MAIN_RECIPE}: run it from a checkout")
    config = load_recipe(str(MAIN_RECIPE))
    config.run_dir = str(run_dir)
    config.eval = replace(config.eval, episodes=shape["eval_episodes"], every=0, chance=False)
    config.checkpoint_every = 0
    config.plots = config.tensorboard = False
    config.progress = replace(config.progress, enabled=False)
    return config


def _warm_start(root: Path, shape: dict[str, Any]) -> str:
    """The main job's warm start, run once; its checkpoint is every run's starting policy."""
    config = _recipe(root / "warm", shape)
    config.warm_start = replace(config.warm_start, episodes=shape["warm_episodes"], steps=shape["warm_steps"])
    config.steps = 0
    config.build().run()
    return str(root / "warm" / "checkpoints" / "warm-start" / "hf")


def _train(run_dir: Path, name: str, mode: str, policy: str | None, shape: dict[str, Any]) -> dict[str, Any]:
    from vlrl.pool import HostBudget, HostConfig

    config = _recipe(run_dir, shape)
    config.model_path, config.warm_start, config.steps = policy or config.model_path, None, shape["steps"]
    config.driver = replace(config.driver, **MODES[mode])
    if name == "long":
        source = config.sources[0]
        source.codebase = "desktop-latency"
        source.agent = replace(source.agent, max_turns=shape["turns"])
        source.group_size = shape["group_size"]
        config.driver = replace(config.driver, groups_per_batch=shape["groups_per_batch"])
        hosts = shape["env_hosts"]
        config.pool.budget = HostBudget(total_hosts=1 + hosts, shares={"loop": 1, "desktop-latency": hosts})
        config.pool.env_host = HostConfig(max_tenants=64, threads=64)  # a delay holds a thread, not a core
        # One decode thread: with up to 128 episodes in flight beside the trainer, two threads
        # oversubscribed the two cores (measured: 10 synchronous steps in 219 s with two, 141 s with one).
        config.engine = replace(config.engine, torch_threads=1)
        config.micro_batches = replace(config.micro_batches, max_tokens_per_micro_batch=8192)
        # Fifteen tries make most groups all-pass (and an untrained policy all-fail): train every
        # group, so that both modes take the same steps on the same groups' worth of episodes.
        config.advantage.sampler = replace(config.advantage.sampler, include_min=True, include_max=True)
        config.advantage.drop_zero_advantage = False
    from vlrl.job.train_job import TrainJob

    with CpuMeter() as cpu:
        summary = TrainJob(config, hold_first_push=shape["hold_first_push"] and mode == "async").run()
    log = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [r for r in records if r.get("phase") == "rl"]
    log_start = log.stat().st_mtime - records[-1]["time_s"]  # the last record (the summary) was the last write
    rl_start, rl_end = log_start + steps[0]["time_s"] - steps[0]["time/step_s"], log_start + steps[-1]["time_s"]
    busy = cpu.busy_between(rl_start, rl_end)
    lags: Counter[int] = Counter()
    for record in steps:
        for key, tokens in record.items():
            if key.startswith("batch/tokens_lag"):
                lags[int(key.removeprefix("batch/tokens_lag"))] += int(tokens)
    times = [r["time/step_s"] for r in steps]
    return {
        "step_s": spread(times),
        **{name: spread([r[f"time/{name}"] for r in steps]) for name in TIME_PARTS},
        "rl_wall_s": sum(times),
        "staleness_tokens": {str(lag): lags[lag] for lag in sorted(lags)},
        "stale_tokens_cut": steps[-1].get("groups/stale_tokens", 0),
        "spanning_sequences": sum(int(r.get("batch/spanning_sequences", 0)) for r in steps),
        "success": summary["success_last"],
        "cpu_busy_s": busy,
        "cpu_utilization": busy / (CpuMeter.cores() * (rl_end - rl_start)),
    }
