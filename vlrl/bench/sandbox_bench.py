"""``vlrl bench sandbox``: what containing an instance costs, for the harnesses that run real
programs (``xdesktop``, ``browser``), with the bubblewrap sandbox and without (``sandbox='none'``),
side by side: the two kinds alternate, instance by instance, in one run.

- ``start_s``: a new instance to its first observation (construct, then ``reset``): the sandbox
  adds its namespaces, cgroup and tmpfs here;
- ``reset_s`` / ``step_s``: a reused instance's ``reset`` and oracle ``step`` (every program
  of a sandboxed instance is entered with ``nsenter``; the harness's input and screenshots cross
  no boundary, so steps should cost the same);
- ``program_uids``: the users the instance's programs ran as (65534 in the sandbox; the node's own
  user, with ``nsenter`` only, outside it);
- ``pss_mb``: proportional resident memory (shared pages split among the processes mapping them)
  of the instance's process tree at its last episode's end: every program it started, and the
  ``nsenter`` processes that entered them.

Each figure is min / median / max over the instances; ``*_ratio`` is sandbox / none of medians.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from vlrl.bench.proc_memory import tree_memory_mb, tree_uids
from vlrl.bench.spread import spread

INSTANCES = {"smoke": 1, "small": 3, "full": 8}
EPISODES = 3
"""Episodes per instance (the first is the start)."""
SETTINGS = {
    "xdesktop": {"width": 1280, "height": 720, "tasks": ["editor-write-save"], "max_steps": 30},
    "browser": {"width": 640, "height": 480, "max_steps": 30},
}
KINDS = ("bubblewrap", "none")
RATIOS = {"start_s_ratio": "start_s", "reset_s_ratio": "reset_s", "step_s_ratio": "step_s", "pss_mb_ratio": "pss_mb"}
"""Sandbox / none, of the medians."""


def run(size: str = "small") -> dict[str, Any]:
    from harnesses.browser import BrowserHarness
    from harnesses.xdesktop import XDesktopHarness

    factories = {"xdesktop": XDesktopHarness, "browser": BrowserHarness}
    harnesses: dict[str, Any] = {}
    for name, factory in factories.items():
        figures: dict[str, dict[str, list[float]]] = {kind: {"start_s": [], "reset_s": [], "step_s": [], "pss_mb": [], "uids": []} for kind in KINDS}
        for instance in range(INSTANCES[size]):
            for kind in KINDS if instance % 2 == 0 else KINDS[::-1]:
                _measure(factory, {**SETTINGS[name], "sandbox": kind}, instance, figures[kind])
        result = {
            kind: {
                **{key: spread(values) for key, values in figures[kind].items() if key != "uids"},
                "program_uids": sorted(set(figures[kind]["uids"])),
            }
            for kind in KINDS
        }
        for ratio, key in RATIOS.items():
            result[ratio] = statistics.median(figures["bubblewrap"][key]) / statistics.median(figures["none"][key])
        harnesses[name] = result
    return {"benchmark": "sandbox", "size": size, "instances": INSTANCES[size], "episodes": EPISODES, "harnesses": harnesses}


def _measure(factory: Any, settings: dict[str, Any], instance: int, into: dict[str, list[float]]) -> None:
    started = time.perf_counter()
    harness = factory(**settings)
    try:
        for episode in range(EPISODES):
            began = time.perf_counter()
            harness.reset(seed=1000 * instance + episode)
            now = time.perf_counter()
            (into["start_s"] if episode == 0 else into["reset_s"]).append(now - (started if episode == 0 else began))
            while True:
                began = time.perf_counter()
                _, _, terminated, truncated, _ = harness.step(harness.oracle())
                into["step_s"].append(time.perf_counter() - began)
                if terminated or truncated:
                    break
        pids = [getattr(p, "pid", p) for p in harness.processes()]
        into["pss_mb"].append(tree_memory_mb(pids))
        into["uids"].extend(tree_uids(pids))
    finally:
        harness.close()
