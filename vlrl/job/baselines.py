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

An agent program of the user's own (``DataSource.external``) is played the same way through the
program itself: vlrl answers its requests with the scripted clicks (``ScriptedClicks``), written
in the source's ``agent.action_format`` in pixels of the newest screenshot of the request, and
reads the program's reward. Its ``oracle`` is the warm start's teacher (``WarmStart.teacher``)
when one is given, else it is not measured (None).

``best`` is the higher of ``chance`` and ``constant``: the figure a warm start or an RL stage must
beat before it has learnt anything. ``TrainJob``'s warm-start verdict (``below_baseline``) wants
the warm start above it by more than one standard error of the difference, binomial over the
evaluation's episodes: on a few hundred seeds a point or two above the best constant is noise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import random
from typing import Literal

from vlrl.config import DataSource
from vlrl.harness import Action, Observation
from vlrl.job.action_text import action_text
from vlrl.pool.episode import Move, ScriptedEpisode, play_episode
from vlrl.pool.harness_pool import HarnessPool
from vlrl.pool.tenant import TenantContext
from vlrl.rollout.external.run import ExternalRun
from vlrl.rollout.external.teacher import ProgramTeacher, TeacherFailed
from vlrl.rollout.parsers import ScreenMap

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


@dataclass(slots=True)
class ScriptedClicks:
    """Replies to an agent program's requests: a click in ``action_format`` at a uniformly random
    point (``point`` None) or at grid point ``point`` of a ``grid``, in pixels of the newest
    screenshot of the request (``rollout.external.teacher.Replies``)."""

    action_format: str
    seed: int
    grid: tuple[int, int] = (1, 1)
    point: int | None = None
    points: tuple[tuple[int, int], ...] = ()
    """The grid's points on the first screen seen."""
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    async def __call__(self, body: dict[str, Any], images: list[Any]) -> str:
        if not images:
            raise TeacherFailed("the request holds no screenshot to click on (a baseline clicks on the newest one)")
        width, height = images[-1].width, images[-1].height
        if self.point is None:
            x, y = self._rng.randrange(width), self._rng.randrange(height)
        else:
            self.points = self.points or grid_points(width, height, self.grid)
            x, y = self.points[self.point]
        return action_text(Action.click(x, y), self.action_format, ScreenMap(width, height, width, height))


@dataclass(frozen=True, slots=True)
class ProgramSweep:
    """A tenant: an agent program played on one seed with scripted clicks (``ScriptedClicks``):
    once with random clicks (``policy='random'``, a ``SweepResult`` of one win), once per grid
    point (``'constant'``), or once against ``teacher`` (``'teacher'``)."""

    starts_program = True

    source: DataSource
    seed: int
    policy: Literal["random", "constant", "teacher"]
    grid: tuple[int, int] = (1, 1)
    teacher: ProgramTeacher | None = None

    async def run(self, ctx: TenantContext) -> SweepResult:
        count = self.grid[0] * self.grid[1] if self.policy == "constant" else 1
        wins, points, task = [], (), ""
        for index in range(count):
            point = None if self.policy == "random" else index
            scripted = ScriptedClicks(self.source.agent.action_format, self.seed, self.grid, point)
            replies: Any = self.teacher if self.policy == "teacher" else scripted
            group_id = f"baseline/{self.source.name}/{self.seed}"
            run = ExternalRun(self.source, seed=self.seed, group_id=group_id, sample_index=index, teacher=replies)
            played = await run.play(ctx)  # a program failing under a baseline fails the seed's (counted) run
            wins.append(played.report.success)
            task = played.task
            points = points or getattr(replies, "points", ())
        return SweepResult(self.seed, task, tuple(wins), points)


@dataclass(kw_only=True, slots=True)
class Outcomes:
    """What the three scripted policies did on one source's seeds (failed runs left out)."""

    seeds: list[int]
    chance: dict[int, tuple[str, bool]]
    """seed -> (task, success) of random clicks."""
    oracle: dict[int, tuple[str, bool]] | None
    """None: not measured (an agent program without a teacher)."""
    sweeps: dict[int, SweepResult]


def summarise(outcomes: Outcomes) -> dict[str, Any]:
    """One source's baselines: each kind's rate over its played seeds, per task family too, the
    best constant point, and the seeds they were measured on (``seeds``: first and last)."""
    out: dict[str, Any] = {"seeds": [min(outcomes.seeds), max(outcomes.seeds)], "episodes": len(outcomes.seeds)}
    tasks: dict[str, dict[str, float]] = defaultdict(dict)
    out["oracle"] = None
    for kind, played in (("chance", outcomes.chance), ("oracle", outcomes.oracle)):
        if played is None:
            continue
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
    kinds = 2 if outcomes.oracle is None else 3
    out["failed"] = kinds * len(outcomes.seeds) - len(outcomes.chance) - len(outcomes.oracle or ()) - len(outcomes.sweeps)
    return out


async def measure(
    pool: HarnessPool,
    sources: list[DataSource],
    *,
    seed: int,
    episodes: int,
    grid: tuple[int, int],
    teacher: ProgramTeacher | None = None,
) -> dict[str, dict[str, Any]]:
    """Every source's baselines (``summarise``) on seeds ``seed .. seed + episodes - 1``;
    ``teacher``: an agent program's oracle (the warm start's teacher), if any."""
    jobs, owners = [], []
    for source in sources:
        env = {"codebase": source.env_pool, "env_settings": source.env.as_kwargs()}
        turns = source.agent.max_turns
        for k in range(episodes):
            for kind, tenant in _baseline_tenants(source, seed + k, turns, grid, teacher):
                jobs.append((tenant, env))
                owners.append((source.name, kind, seed + k))
    results = await pool.run_many(jobs)
    played = {
        s.name: Outcomes(
            seeds=list(range(seed, seed + episodes)), chance={}, sweeps={},
            oracle=None if s.external is not None and teacher is None else {},
        )
        for s in sources
    }  # fmt: skip
    for (name, kind, k), result in zip(owners, results):
        if result.status != "ok":
            continue
        value = result.value
        if kind == "constant":
            played[name].sweeps[k] = value
        elif isinstance(value, SweepResult):  # a program's random clicks or teacher: one episode
            getattr(played[name], kind)[k] = (value.task, value.wins[0])
        else:
            getattr(played[name], kind)[k] = (value.task or "", bool(value.success))
    return {name: summarise(outcomes) for name, outcomes in played.items()}


def _baseline_tenants(
    source: DataSource, seed: int, turns: int, grid: tuple[int, int], teacher: ProgramTeacher | None
) -> list[tuple[str, Any]]:
    if source.external is None:
        return [
            ("chance", ScriptedEpisode(seed=seed, policy="random", max_steps=turns)),
            ("oracle", ScriptedEpisode(seed=seed, policy="oracle", max_steps=turns)),
            ("constant", ConstantSweep(seed=seed, grid=grid, max_steps=turns)),
        ]
    tenants = [
        ("chance", ProgramSweep(source, seed, "random")),
        ("constant", ProgramSweep(source, seed, "constant", grid=grid)),
    ]
    if teacher is not None:
        tenants.append(("oracle", ProgramSweep(source, seed, "teacher", teacher=teacher.located())))
    return tenants


def overall(per_source: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each kind's rate over all sources, weighted by their seeds (``best``: of the overall rates)."""
    n = {name: b["episodes"] for name, b in per_source.items()}
    out: dict[str, float | None] = {}
    for kind in KINDS:
        measured = {name: b[kind] for name, b in per_source.items() if b[kind] is not None}
        weight = sum(n[name] for name in measured)
        out[kind] = sum(value * n[name] for name, value in measured.items()) / weight if weight else None
    out["best"] = max(out["chance"], out["constant"])
    return out


def _figure(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f}"


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
        f" constant point {baselines['constant']:.3f}, the oracle {_figure(baselines['oracle'])})"
    )
