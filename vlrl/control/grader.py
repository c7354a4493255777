"""Group-wise graders, run asynchronously alongside rollouts.

A grader scores a whole finished group at once (a judge model comparing the trajectories, or a
checker), so it may rank trajectories against each other. ``GraderRunner`` runs grader calls as
background tasks on the driver's event loop: at most ``max_concurrency`` calls in flight, each
crashed, hung or malformed call retried after an exponential back-off, and a group that fails
every attempt reported as a ``GradeResult`` with ``error`` instead of raising (a call that
passes ``timeout_s`` counts as failed, so a hung judge ends every group it holds). Results arrive in
completion order, possibly late (after groups submitted later); the driver collects what is
ready and never waits on a slow judge unless it has nothing else to do.

A result's metas carry the grader's rewards (``dataclasses.replace``); ``SeqMeta`` has one
reward, so the rollout's own rewards are kept in ``GradeResult.original_rewards`` for metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol, runtime_checkable

from vlrl.config import Ge, Gt
from vlrl.records import SeqMeta, group_id_of


@runtime_checkable
class Grader(Protocol):
    async def grade(self, metas: Sequence[SeqMeta]) -> Sequence[float]:
        """One finite reward per sequence of the group, in the order given."""
        ...


@dataclass(frozen=True, slots=True)
class GradeResult:
    group_id: str
    metas: tuple[SeqMeta, ...]
    """The group with the grader's rewards; on failure, the metas as submitted."""
    original_rewards: tuple[float, ...]
    """Rewards before grading (the rollout's), in the order of ``metas``."""
    error: str | None = None
    """Why the last attempt failed, when every attempt did."""

    @property
    def ok(self) -> bool:
        return self.error is None


class GraderRunner:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Concurrency and retries of group-wise grading."""

        max_concurrency: Annotated[int, Ge(1)] = 8
        """Grader calls in flight at once (a judge server's capacity)."""

        max_attempts: Annotated[int, Ge(1)] = 3
        """Calls per group before its failure is reported."""

        backoff_s: Annotated[float, Ge(0)] = 1.0
        """Wait after the first failed call; later waits grow by ``backoff_factor``."""

        backoff_factor: Annotated[float, Ge(1)] = 2.0
        """Growth of the wait per further failure: wait ``k`` is ``backoff_s * backoff_factor**(k-1)``."""

        timeout_s: Annotated[float, Gt(0)] = 300.0
        """Seconds one call may take before it counts as failed (and is retried). Always bounded: a
        hung judge must end as a failed group, not hold the driver's in-flight slots forever."""

        def delay(self, failures: int) -> float:
            """Seconds to wait after the ``failures``-th failed call (1-based)."""
            return self.backoff_s * self.backoff_factor ** (failures - 1)

        def build(self, grader: Grader) -> GraderRunner:
            return GraderRunner(self, grader)

    def __init__(self, config: GraderRunner.Config, grader: Grader) -> None:
        if not isinstance(grader, Grader):
            raise TypeError(
                f"GraderRunner needs a Grader (an object with async grade(metas)), got {type(grader).__name__}"
            )
        self.config = config
        self.grader = grader
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._results: asyncio.Queue[GradeResult] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending = 0

    @property
    def pending(self) -> int:
        """Submitted groups whose result has not been produced yet."""
        return self._pending

    def submit(self, metas: Sequence[SeqMeta]) -> None:
        """Start grading a group in the background (call from the running event loop)."""
        group_id_of(metas)
        task = asyncio.get_running_loop().create_task(self._grade_into_queue(tuple(metas)))
        self._pending += 1
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def ready(self) -> list[GradeResult]:
        """Results finished so far, in completion order, without waiting."""
        out = []
        while not self._results.empty():
            out.append(self._results.get_nowait())
        return out

    async def next_result(self) -> GradeResult:
        """Wait for the next finished result."""
        if self._results.empty() and not self._pending:
            raise RuntimeError("GraderRunner.next_result: nothing submitted is still pending")
        return await self._results.get()

    async def grade(self, metas: Sequence[SeqMeta]) -> GradeResult:
        """Grade one group now, with the runner's concurrency limit and retries."""
        group_id = group_id_of(metas)
        originals = tuple(m.reward for m in metas)
        name = type(self.grader).__name__
        error = ""
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                async with self._slots:
                    rewards = await asyncio.wait_for(self.grader.grade(metas), self.config.timeout_s)
                checked = _check_rewards(rewards, len(metas))
            except Exception as failure:  # a crashed judge or checker: retry, never take the driver down
                error = f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__
                if attempt < self.config.max_attempts:
                    await asyncio.sleep(self.config.delay(attempt))
                continue
            graded = tuple(dataclasses.replace(m, reward=r) for m, r in zip(metas, checked))
            return GradeResult(group_id, graded, originals)
        message = f"grader {name} failed {self.config.max_attempts} attempts on group {group_id!r}; last: {error}"
        return GradeResult(group_id, tuple(metas), originals, message)

    async def _grade_into_queue(self, metas: tuple[SeqMeta, ...]) -> None:
        try:
            self._results.put_nowait(await self.grade(metas))
        finally:  # counted down with the result in the queue, or on cancellation
            self._pending -= 1


def _check_rewards(rewards: Sequence[float], n: int) -> list[float]:
    values = [float(r) for r in rewards]
    if len(values) != n:
        raise ValueError(f"returned {len(values)} rewards for a group of {n}")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"returned non-finite rewards {values}")
    return values


@dataclass(frozen=True, slots=True)
class ShortestSuccessGrader:
    """Reward success, and more so the shorter it was than the group's other successes.

    Failures get 0. A success of length ``L`` (turns or generated tokens), among successes of
    lengths ``L_min .. L_max`` in its group, gets ``1 - length_weight * (L - L_min) / (L_max - L_min)``
    (1 when they are all equal), so the quickest solution scores 1, the slowest ``1 - length_weight``,
    and any success still beats any failure. Relative to the group, not absolute: a task that needs
    20 steps is not punished for needing them.
    """

    length_weight: float = 0.5
    """Reward taken from the slowest success, in ``[0, 1)``."""
    length: Literal["turns", "response_tokens"] = "turns"
    """What "shorter" means: fewer actions, or fewer generated tokens."""

    def __post_init__(self) -> None:
        if not 0 <= self.length_weight < 1:
            raise ValueError(f"ShortestSuccessGrader.length_weight={self.length_weight}; expected a number in [0, 1)")
        if self.length not in ("turns", "response_tokens"):
            raise ValueError(f"ShortestSuccessGrader.length={self.length!r}; expected 'turns' or 'response_tokens'")

    async def grade(self, metas: Sequence[SeqMeta]) -> list[float]:
        lengths = [m.turns if self.length == "turns" else m.num_response_tokens for m in metas]
        solved = [n for m, n in zip(metas, lengths) if m.success]
        if not solved:
            return [0.0] * len(metas)
        shortest, span = min(solved), max(solved) - min(solved)
        return [
            (1.0 - self.length_weight * (n - shortest) / span if span else 1.0) if m.success else 0.0
            for m, n in zip(metas, lengths)
        ]
