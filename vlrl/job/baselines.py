"""What a policy's held-out success is measured against: three scripted policies on the very seeds
the policy is evaluated on, per source and per task family.

- ``chance``: uniformly random clicks, a fresh point every turn.
- ``constant``: the best fixed point, clicked every turn. A degenerate policy (one point, twice)
  beats random clicks easily on a screen whose targets sit in the same place often enough (a
  keypad that moves little), so a trained policy must beat this one to have learnt the screen.
  Every point of a ``cols x rows`` grid of cell centres is played on every seed (one tenant per
  seed plays them all on one harness instance), and the best point per source, and per task
  family, is kept. It is chosen on the seeds it is scored on: an optimistic figure for a constant
  policy on new seeds, and so a strict bar.
- ``oracle``: the harness's scripted policy (random clicks where it has no script), what the warm
  start's demonstrations are made of: the ceiling the task allows a policy that sees the screen.

``best`` is the higher of ``chance`` and ``constant``: the figure a warm start or an RL stage must
beat before it has learnt anything. ``TrainJob``'s warm-start verdict (``below_baseline``) wants
the warm start above it by more than one standard error of the difference, binomial over the
evaluation's episodes: on a few hundred seeds a point or two above the best constant is noise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlrl.config import DataSource
from vlrl.harness import Action, Observation
from vlrl.pool.episode import Move, ScriptedEpisode, play_episode
from vlrl.pool.harness_pool import HarnessPool
from vlrl.pool.tenant import TenantContext

KINDS = ("chance", "constant", "oracle")


@dataclass(frozen=True, slots=True)
class SweepResult:
    seed: int
    task: str
    wins: tuple[bool, ...]
    """Success of the episode played with each grid point, in ``grid_points`` order."""
    points: tuple[tuple[int, int], ...]
    """The grid points in screen pixels of this seed's screen."""


def grid_points(width: int, height: int, grid: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """Centres of a ``cols x rows`` grid of cells over a ``width x height`` screen, row by row."""
    cols, rows = grid
    return tuple(((2 * c + 1) * width // (2 * cols), (2 * r + 1) * height // (2 * rows)) for r in range(rows) for c in range(cols))


@dataclass(frozen=True, slots=True)
class ConstantSweep:
    """A tenant: one seed played once per grid point, each episode clicking its point every turn."""

    seed: int
    grid: tuple[int, int]
    max_steps: int

    async def run(self, ctx: TenantContext) -> SweepResult:
        env = await ctx.open_env()
        wins: list[bool] = []
        points: tuple[tuple[int, int], ...] = ()
        task = ""
        for index in range(self.grid[0] * self.grid[1]):

            async def player(obs: Observation, note: str, index: int = index) -> Move:
                nonlocal points
                points = points or grid_points(obs.width, obs.height, self.grid)
                return Action.click(*points[index])

            episode = await play_episode(env, player, seed=self.seed, max_turns=self.max_steps)
            wins.append(episode.success)
            task = episode.task
        return SweepResult(self.seed, task, tuple(wins), points)


@dataclass(kw_only=True, slots=True)
class Outcomes:
    """What the three scripted policies did on one source's seeds (failed runs left out)."""

    seeds: list[int]
    chance: dict[int, tuple[str, bool]]
    """seed -> (task, success) of random clicks."""
    oracle: dict[int, tuple[str, bool]]
    sweeps: dict[int, SweepResult]


def summarise(outcomes: Outcomes) -> dict[str, Any]:
    """One source's baselines: each kind's rate over its played seeds, per task family too, the
    best constant point, and the seeds they were measured on (``seeds``: first and last)."""
    out: dict[str, Any] = {"seeds": [min(outcomes.seeds), max(outcomes.seeds)], "episodes": len(outcomes.seeds)}
    tasks: dict[str, dict[str, float]] = defaultdict(dict)
    for kind, played in (("chance", outcomes.chance), ("oracle", outcomes.oracle)):
        out[kind] = _mean([won for _, won in played.values()])
        by_task: dict[str, list[bool]] = defaultdict(list)
        for task, won in played.values():
            by_task[task or "(unnamed)"].append(won)
        for task, wins in by_task.items():
            tasks[task][kind] = _mean(wins)
    sweeps = list(outcomes.sweeps.values())
    if sweeps:
        table = np.array([s.wins for s in sweeps], dtype=float)  # (seeds, points)
        best = int(table.mean(axis=0).argmax())
        out["constant"] = float(table[:, best].mean())
        out["constant_point"] = list(sweeps[0].points[best])
        for task in sorted({s.task or "(unnamed)" for s in sweeps}):
            rows = [i for i, s in enumerate(sweeps) if (s.task or "(unnamed)") == task]
            tasks[task]["constant"] = float(table[rows].mean(axis=0).max())  # the best point for this family
    else:
        out["constant"], out["constant_point"] = 0.0, None
    out["best"] = max(out["chance"], out["constant"])
    out["tasks"] = {task: tasks[task] for task in sorted(tasks)}
    out["failed"] = 3 * len(outcomes.seeds) - len(outcomes.chance) - len(outcomes.oracle) - len(outcomes.sweeps)
    return out


async def measure(
    pool: HarnessPool, sources: list[DataSource], *, seed: int, episodes: int, grid: tuple[int, int]
) -> dict[str, dict[str, Any]]:
    """Every source's baselines (``summarise``) on seeds ``seed .. seed + episodes - 1``."""
    jobs, owners = [], []
    for source in sources:
        env = {"codebase": source.codebase, "env_settings": source.env.as_kwargs()}
        turns = source.agent.max_turns
        for k in range(episodes):
            for kind, tenant in (
                ("chance", ScriptedEpisode(seed=seed + k, policy="random", max_steps=turns)),
                ("oracle", ScriptedEpisode(seed=seed + k, policy="oracle", max_steps=turns)),
                ("constant", ConstantSweep(seed=seed + k, grid=grid, max_steps=turns)),
            ):
                jobs.append((tenant, env))
                owners.append((source.name, kind, seed + k))
    results = await pool.run_many(jobs)
    played = {s.name: Outcomes(seeds=list(range(seed, seed + episodes)), chance={}, oracle={}, sweeps={}) for s in sources}
    for (name, kind, k), result in zip(owners, results):
        if result.status != "ok":
            continue
        value = result.value
        if kind == "constant":
            played[name].sweeps[k] = value
        else:
            getattr(played[name], kind)[k] = (value.task or "", bool(value.success))
    return {name: summarise(outcomes) for name, outcomes in played.items()}


def overall(per_source: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each kind's rate over all sources, weighted by their seeds (``best``: of the overall rates)."""
    n = {name: b["episodes"] for name, b in per_source.items()}
    total = max(sum(n.values()), 1)
    out = {kind: sum(b[kind] * n[name] for name, b in per_source.items()) / total for kind in KINDS}
    out["best"] = max(out["chance"], out["constant"])
    return out


def _mean(values: list[bool]) -> float:
    return float(np.mean(values)) if values else 0.0


def standard_error(success: float, best: float, episodes: int) -> float:
    """The standard error of ``success - best``, two success rates each measured on ``episodes``
    evaluation episodes: binomial over the seeds, ``sqrt(p (1 - p) / n)`` for each rate, added in
    quadrature (the two are measured independently). 16 of 200 against 14 of 200 is 0.010 apart
    with a standard error of 0.026."""
    n = max(episodes, 1)
    return math.sqrt(success * (1 - success) / n + best * (1 - best) / n)


def below_baseline(success: float, baselines: dict[str, float], *, episodes: int, sources: int = 1) -> str:
    """'' when ``success`` beats the best baseline (``overall``'s) by more than one standard error
    of the difference (``standard_error`` over ``episodes x sources`` evaluation episodes), else a
    sentence with the figures. A raw comparison would let noise pass: 16 hits of 200 against the
    best constant's 14 is no evidence that the policy has learnt the screen."""
    best = baselines["best"]
    se = standard_error(success, best, episodes * sources)
    if success - best > se:
        return ""
    if success <= best:
        verdict = f"held-out success {success:.3f} is at or below the best baseline {best:.3f}"
    else:
        verdict = (
            f"held-out success {success:.3f} is above the best baseline {best:.3f} by {success - best:.3f}, within one"
            f" standard error ({se:.3f}, binomial over {episodes * sources} episodes each)"
        )
    return (
        f"{verdict} on the same {episodes} seeds per source (random clicks {baselines['chance']:.3f}, the best"
        f" constant point {baselines['constant']:.3f}, the oracle {baselines['oracle']:.3f})"
    )
