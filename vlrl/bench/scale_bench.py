"""``vlrl bench scale``: one RL step's control plane at 1k to 16k sequences on a multi-node cluster.

A Ray cluster of simulated nodes (``scale_cluster``: one raylet and object store each, one GCS),
a Harness Pool with a loop host per node, a ``RayStore``, and the real driver, grader runner,
accept-time hook, micro-batch planner and TP-group packers; only the engine, the harness and the
judge are stand-ins that keep the payload's shapes and sizes and sleep as a latency model
(``scale_standins``). Each batch size runs on a fresh driver (``scale_step``); figures per size:

- ``stages``: per stage (``launch``, ``finish``, ``grading``, ``hook``, ``yield_planning``,
  ``packing``, ``release``), microseconds of CPU and of wall time per sequence, ``spread`` over
  the steps (wall: the time the stage held its thread, not its latency), and the payload bytes
  per sequence the stage's store client moved (``launch``: the pickled tenant and outcome, on a
  sample of one trajectory in ``OUTCOME_SAMPLE``);
- ``driver``: CPU seconds of the driver's process (every thread, Ray's included) and wall
  seconds per step, packing left out (the trainer's packers do it), its RSS, and
  ``loop_held_share``: the share of the step's wall time its stages held the driver's one event
  loop (near 1: the loop is the bottleneck, whatever the CPUs);
- ``processes``: CPU seconds per step and RSS of the store shards, loop hosts, raylets and the
  GCS, with the GCS's open descriptors;
- ``books``, ``books_drift``, ``keys_left``: every generated group trained, the books exact,
  no store key left after the driver closed.

``saturating_stage`` is the stage whose CPU per sequence grows most from the smallest to the
largest measured size, and ``linearity``: the driver's CPU per sequence at the largest size over
the smallest's. Sizes not measured (64k unless ``full`` fits) are ``projection``: each figure
per sequence extended from the two largest measured points as a power law, labelled projected.

``stale_scan_fix`` (``small``, ``full``): 4k sequences run again in the same cluster on the
driver as it was before its staleness check was made incremental (the whole buffer scanned after
every finished group: O(groups^2) a step), beside the fixed driver's figures. With two sizes or
more the bench writes its curves as PNGs under ``runs/bench/scale/`` (``plots``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import uuid
from pathlib import Path
from typing import Any

from vlrl.bench.curves import curves_of
from vlrl.bench.report import plot
from vlrl.bench.scale_cluster import simulated_cluster
from vlrl.bench.scale_standins import LatencyModel, StoreSetup
from vlrl.bench.scale_step import DRIVER_STAGES, Parts, measure_size
from vlrl.bench.spread import spread

STAGES = ("launch", "finish", "grading", "hook", "yield_planning", "packing", "release")
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"nodes": 2, "points": ((256, 1),), "in_flight": 256, "project": (), "before_fix": None},
    "small": {
        "nodes": 3, "points": ((1024, 2), (4096, 1)), "in_flight": 1024, "project": (16384,), "before_fix": (4096, 1),
    },
    "full": {
        "nodes": 4, "points": ((1024, 3), (4096, 1), (16384, 1)), "in_flight": 1024, "project": (65536,),
        "before_fix": (4096, 1),
    },
}  # fmt: skip
"""Per size: simulated nodes, ``(sequences, steps)`` measured, sequences rolling out at once, the
sizes projected from the measured points, and the ``(sequences, steps)`` run again on the driver
as it was before its staleness scan was fixed (``stale_scan_fix``; 4k: 16k twice would not fit
this machine's hour)."""
LATENCY = LatencyModel()
PLOTS = Path("runs/bench/scale")
"""Where the bench writes its curves (``SIZE_stage_cpu_per_sequence.png``, ``SIZE_process_cpu_per_sequence.png``)."""


def run(size: str) -> dict[str, Any]:
    from vlrl.pool import HarnessPool, HostBudget, HostConfig
    from vlrl.store.ray_store import RayStore

    plan = SIZES[size]
    nodes = plan["nodes"]
    with simulated_cluster(nodes) as cluster:
        store_config = RayStore.Config(namespace=f"bench-scale-{uuid.uuid4().hex[:8]}")
        store = store_config.build()
        pool = HarnessPool.Config(
            budget=HostBudget(total_hosts=nodes + 1, shares={"loop": nodes, "desktop": 1}),
            loop_host=HostConfig(max_tenants=plan["in_flight"], threads=2),
            env_host=HostConfig(max_tenants=plan["in_flight"], threads=1),  # leased per trajectory, never called
        ).build(loop_setup=StoreSetup(store_config))
        try:
            points, before = asyncio.run(_every_size(Parts(cluster, pool, store, store_config), plan))
        finally:
            pool.shutdown()
            store.destroy()
    out = report(points, plan["project"], nodes=nodes, in_flight=plan["in_flight"])
    if before is not None:
        after = next(p for p in points if p["sequences"] == before["sequences"])
        out["stale_scan_fix"] = fix_figures(before, after)
    if len(points) > 1:  # a curve needs two sizes
        PLOTS.mkdir(parents=True, exist_ok=True)
        out["plots"] = [str(plot(c, PLOTS / f"{size}_{c.name}.png")) for c in curves_of("scale", out)]
    return out


async def _every_size(parts: Parts, plan: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Each size of ``plan`` in turn on one event loop; then, with ``before_fix``, that size again
    on the driver as it was before its staleness fix."""
    measure = functools.partial(measure_size, parts, in_flight=plan["in_flight"], latency=LATENCY)
    points = []
    for i, (n, steps) in enumerate(plan["points"]):
        points.append(summarise(await measure(n, steps, seed=i * 10**6)))
        _progress(points[-1])
    if plan["before_fix"] is None:
        return points, None
    n, steps = plan["before_fix"]
    before = summarise(await measure(n, steps, seed=10**9, rescan=True))
    _progress(before, "before the staleness fix")
    return points, before


def _progress(point: dict[str, Any], note: str = "") -> None:
    """One line per size as it is measured (a long run shows where it is, and what it has)."""
    driver = point["driver"]
    stages = ", ".join(f"{s} {f['cpu_us_per_seq']['median']:.0f}" for s, f in point["stages"].items())
    print(
        f"scale: {point['sequences']} sequences x {point['steps']} step(s){' ' + note if note else ''}:"
        f" driver {driver['cpu_us_per_seq']['median']:.0f} us CPU a sequence,"
        f" {driver['wall_s']['median']:.1f} s a step; stages (us CPU a sequence): {stages}",
        flush=True,
    )


def summarise(measured: dict[str, Any]) -> dict[str, Any]:
    """One size's per-step figures as per-sequence spreads."""
    steps = measured.pop("steps")
    n = measured["sequences"]
    per_seq = lambda values: spread([v / n * 1e6 for v in values])  # noqa: E731  (microseconds)
    stages = {
        stage: {
            "cpu_us_per_seq": per_seq([s["stages"][stage]["cpu_s"] for s in steps]),
            "wall_us_per_seq": per_seq([s["stages"][stage]["wall_s"] for s in steps]),
        }
        for stage in STAGES
    }
    for stage in ("finish", "hook", "packing"):
        stages[stage]["bytes_per_seq"] = sum(s["bytes"][stage] for s in steps) / (n * len(steps))
    stages["launch"]["bytes_per_seq"] = measured.pop("launch_bytes_per_sequence")
    for stage in ("grading", "yield_planning", "release"):
        stages[stage]["bytes_per_seq"] = 0  # metadata only: these stages read no payload
    driver = {
        "cpu_s": spread([s["driver"]["cpu_s"] for s in steps]),
        "thread_cpu_s": spread([s["driver"]["thread_cpu_s"] for s in steps]),
        "wall_s": spread([s["driver"]["wall_s"] for s in steps]),
        "cpu_us_per_seq": per_seq([s["driver"]["cpu_s"] for s in steps]),
        "unstaged_thread_cpu_us_per_seq": per_seq([s["driver"]["thread_cpu_s"] - _staged_cpu(s) for s in steps]),
        "rss_mb": max(s["driver"]["rss_mb"] for s in steps),
        "loop_held_share": spread([_held(s) / s["driver"]["wall_s"] for s in steps]),
        "gc_us_per_seq": per_seq([s["driver"]["gc_s"] for s in steps]),
        "gc_full_us_per_seq": per_seq([s["driver"]["gc_full_s"] for s in steps]),
        "gc_full_collections": [s["driver"]["gc_full_collections"] for s in steps],
    }
    processes = {
        role: {
            "cpu_s": spread([s["processes"][role]["cpu_s"] for s in steps]),
            "rss_mb": steps[-1]["processes"][role]["rss_mb"],
            **({"fds": steps[-1]["processes"][role]["fds"]} if role == "gcs" else {}),
        }
        for role in steps[-1]["processes"]
    }
    return {
        **measured,
        "steps": len(steps),
        "sequences_per_step": [s["sequences"] for s in steps],
        "finished_per_step": [s["finished"] for s in steps],
        "tokens_per_seq": sum(s["tokens"] for s in steps) / (n * len(steps)),
        "windows_per_step": steps[-1]["windows"],
        "stages": stages,
        "driver": driver,
        "processes": processes,
    }


def _staged_cpu(step: dict[str, Any]) -> float:
    """Thread CPU seconds the driver's stages took in one step (packing is the trainer's)."""
    return sum(step["stages"][stage]["cpu_s"] for stage in DRIVER_STAGES if stage != "packing")


def _held(step: dict[str, Any]) -> float:
    """Seconds the driver's stages held its event loop in one step (packing is the trainer's)."""
    return sum(step["stages"][stage]["wall_s"] for stage in DRIVER_STAGES if stage != "packing")


def fix_figures(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """One size measured twice in one run: the driver rescanning its buffer for stale
    groups after every finished group (``before``) and checking each group once (``after``)."""
    figures = lambda p: {  # noqa: E731
        "yield_planning_cpu_us_per_seq": p["stages"]["yield_planning"]["cpu_us_per_seq"],
        "driver_cpu_us_per_seq": p["driver"]["cpu_us_per_seq"],
        "driver_wall_s": p["driver"]["wall_s"],
        "books": p["books"],
    }
    return {"sequences": after["sequences"], "before": figures(before), "after": figures(after)}


def growth(curve: dict[int, float]) -> float:
    """Figure per sequence at the largest size over the smallest's (1.0: linear in all)."""
    sizes = sorted(curve)
    return curve[sizes[-1]] / curve[sizes[0]] if curve[sizes[0]] > 0 else math.inf


def saturating_stage(curves: dict[str, dict[int, float]]) -> tuple[str, float]:
    """The stage whose per-sequence figure grows most over the measured sizes, and its growth
    (stages that cost nothing at some size are left out: their growth says nothing)."""
    measured = [stage for stage, curve in curves.items() if min(curve.values()) > 0]
    name = max(measured, key=lambda stage: growth(curves[stage]))
    return name, growth(curves[name])


def project(curve: dict[int, float], size: int) -> float:
    """``curve`` (per-sequence figure by size) at ``size``, extended from its two largest points
    as a power law ``a * n**b`` (one point: held flat)."""
    sizes = sorted(curve)
    if len(sizes) == 1 or curve[sizes[-2]] <= 0 or curve[sizes[-1]] <= 0:
        return curve[sizes[-1]]
    (n1, y1), (n2, y2) = (sizes[-2], curve[sizes[-2]]), (sizes[-1], curve[sizes[-1]])
    exponent = math.log(y2 / y1) / math.log(n2 / n1)
    return y2 * (size / n2) ** exponent


def report(
    points: list[dict[str, Any]], projected_sizes: tuple[int, ...], *, nodes: int, in_flight: int
) -> dict[str, Any]:
    """The measured points, the per-stage curves, the saturating stage and the projections."""
    median = lambda figure: figure["median"]  # noqa: E731
    curves = {stage: {p["sequences"]: median(p["stages"][stage]["cpu_us_per_seq"]) for p in points} for stage in STAGES}
    driver_curve = {p["sequences"]: median(p["driver"]["cpu_us_per_seq"]) for p in points}
    processes = {"driver": driver_curve} | {
        role: {p["sequences"]: median(p["processes"][role]["cpu_s"]) / p["sequences"] * 1e6 for p in points}
        for role in points[0]["processes"]
    }
    out: dict[str, Any] = {
        "nodes": nodes,
        "in_flight": in_flight,
        "latency_model": dataclasses.asdict(LATENCY),
        "sizes": [p["sequences"] for p in points],
        "points": points,
        "curves_cpu_us_per_seq": {stage: {str(n): v for n, v in c.items()} for stage, c in curves.items()},
        "driver_cpu_us_per_seq": {str(n): v for n, v in driver_curve.items()},
        "process_cpu_us_per_seq": {
            f"{role} (process)": {str(n): v for n, v in curve.items()} for role, curve in processes.items()
        },
    }
    if len(points) > 1:
        stage, ratio = saturating_stage(curves)
        out["saturating_stage"] = {"stage": stage, "growth": ratio, "over": [min(curves[stage]), max(curves[stage])]}
        out["stage_growth"] = {name: growth(c) for name, c in curves.items()}
        out["process_growth"] = {role: growth(c) for role, c in processes.items()}
        out["linearity"] = growth(driver_curve)
    if projected_sizes:
        out["projection"] = {
            str(size): {
                "projected": True,
                "from_sizes": sorted(driver_curve)[-2:],
                "driver_cpu_us_per_seq": project(driver_curve, size),
                "driver_cpu_s_per_step": project(driver_curve, size) * size / 1e6,
                "cpu_us_per_seq": {stage: project(curve, size) for stage, curve in curves.items()},
            }
            for size in projected_sizes
        }
    return out
