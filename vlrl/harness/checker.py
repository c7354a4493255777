"""The harness checker: the behaviour every harness codebase must show (its contract tests)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from vlrl.harness.actions import Action
from vlrl.harness.base import Harness
from vlrl.harness.errors import ActionError, HarnessError
from vlrl.harness.observation import Observation


class HarnessContractError(AssertionError):
    """A harness that breaks the contract; the message says which rule."""


def check_harness(factory: Callable[[], Harness], *, seeds: tuple[int, ...] = (0, 1)) -> None:
    """Run the contract on fresh instances from ``factory``; raise ``HarnessContractError``."""
    first, second = factory(), factory()
    try:
        _check_types(first)
        _check_determinism(first, second, seeds)
        _check_tasks(first)
        _check_order(first)
        _check_bounds(first)
    finally:
        first.close()
        second.close()
        first.close()  # close is idempotent


def _expect(condition: bool, rule: str) -> None:
    if not condition:
        raise HarnessContractError(rule)


def _check_types(harness: Harness) -> None:
    result = harness.reset(seed=0)
    _expect(isinstance(result, tuple) and len(result) == 2, "reset must return (observation, info)")
    obs, info = result
    _expect(isinstance(obs, Observation), f"reset must return an Observation, got {type(obs).__name__}")
    _expect(isinstance(info, dict), "reset info must be a dict")
    step = harness.step(Action.wait())
    _expect(isinstance(step, tuple) and len(step) == 5, "step must return (obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = step
    _expect(isinstance(obs, Observation), "step must return an Observation")
    _expect(isinstance(reward, float) and math.isfinite(reward), f"reward must be a finite float, got {reward!r}")
    _expect(isinstance(terminated, bool) and isinstance(truncated, bool), "terminated/truncated must be bools")
    _expect(isinstance(info, dict), "step info must be a dict")
    _expect(isinstance(info.get("success"), bool), "step info must say whether the task is solved: info['success']")


def _check_determinism(first: Harness, second: Harness, seeds: tuple[int, ...]) -> None:
    for seed in seeds:
        a, _ = first.reset(seed=seed)
        b, _ = second.reset(seed=seed)
        _expect(
            np.array_equal(a.screenshot, b.screenshot) and a.goal == b.goal,
            f"reset(seed={seed}) must give the same first observation on two instances",
        )


def _check_tasks(harness: Harness) -> None:
    for task in harness.tasks:
        obs, _ = harness.reset(seed=3, options={"task": task})
        _expect(obs.goal is not None, f"task {task!r}: the observation must state the goal")
    try:
        harness.reset(seed=0, options={"task": "no-such-task"})
    except (HarnessError, ValueError) as error:
        _expect("no-such-task" in str(error), "an unknown task error must name the task")
    else:
        raise HarnessContractError("reset with an unknown task must raise HarnessError or ValueError")


def _check_order(harness: Harness) -> None:
    harness.reset(seed=0)
    _, _, terminated, _, _ = harness.step(Action.fail("checker"))
    _expect(terminated, "a fail action must terminate the episode")
    try:
        harness.step(Action.wait())
    except HarnessError:
        pass
    else:
        raise HarnessContractError("step after the episode ended must raise HarnessError until reset")


def _check_bounds(harness: Harness) -> None:
    obs, _ = harness.reset(seed=0)
    try:
        harness.step(Action.click(obs.width + 5, 0))
    except ActionError as error:
        _expect(str(obs.width + 5) in str(error), "an out-of-screen action error must name the coordinate")
    else:
        raise HarnessContractError("a click outside the screenshot must raise ActionError")
