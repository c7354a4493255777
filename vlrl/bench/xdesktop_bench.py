"""``vlrl bench xdesktop``: what a real desktop instance costs, per task family.

One ``XDesktopHarness`` instance (its own Xvfb, openbox and the task's applications) plays each
family's oracle episodes, measured where the cost is paid:

- ``reset_s`` / ``step_s``: wall time of ``reset`` (kill the last apps, fresh sandbox, launch and
  wait for the task's windows) and of one oracle ``step`` (XTest input, then the screen settling);
- ``rss_mb``: resident memory of the instance's process tree (X server, window manager and the
  applications running at the episode's end, entered into its sandbox), summed from ``/proc``;
- ``cold_start_s``: the same family's first episode on a new instance every time (start Xvfb and
  openbox, then reset), what one instance per rollout would pay, beside ``reset_s`` of a warm,
  reused instance: ``warm_over_cold`` is their ratio of medians (lower is better).

Every figure is min / median / max over the episodes; ``oracle_success`` is the fraction of
episodes the oracle solved (1.0 expected: the figures are of working episodes).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from vlrl.bench.proc_memory import tree_memory_mb
from vlrl.bench.spread import spread

EPISODES = {"smoke": 1, "small": 2, "full": 8}
SCREEN = (1280, 720)


def run(size: str = "small") -> dict[str, Any]:
    from harnesses.xdesktop import XDesktopHarness
    from harnesses.xdesktop.tasks import FAMILIES

    episodes = EPISODES[size]
    families: dict[str, Any] = {}
    for family in FAMILIES:
        harness = XDesktopHarness(width=SCREEN[0], height=SCREEN[1], tasks=[family], max_steps=30)
        try:
            resets, steps, rss, solved = [], [], [], 0
            for seed in range(episodes):
                started = time.perf_counter()
                harness.reset(seed=seed)
                resets.append(time.perf_counter() - started)
                while True:
                    action = harness.oracle()
                    started = time.perf_counter()
                    _, _, terminated, truncated, info = harness.step(action)
                    steps.append(time.perf_counter() - started)
                    if terminated or truncated:
                        break
                solved += bool(info["success"])
                rss.append(tree_memory_mb([p.pid for p in harness.processes()], "rss_mb"))
        finally:
            harness.close()
        cold = [_cold_start(XDesktopHarness, family, seed) for seed in range(episodes)]
        families[family] = {
            "reset_s": spread(resets),
            "step_s": spread(steps),
            "rss_mb": spread(rss),
            "cold_start_s": spread(cold),
            "warm_over_cold": statistics.median(resets) / statistics.median(cold),
            "oracle_success": solved / episodes,
            "oracle_steps": len(steps) / episodes,
        }
    return {"benchmark": "xdesktop", "size": size, "screen": list(SCREEN), "episodes": episodes, "families": families}


def _cold_start(factory: Any, family: str, seed: int) -> float:
    started = time.perf_counter()
    harness = factory(width=SCREEN[0], height=SCREEN[1], tasks=[family])
    try:
        harness.reset(seed=seed)
        return time.perf_counter() - started
    finally:
        harness.close()
