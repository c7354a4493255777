"""The harness checker: the behaviour every harness codebase must show (its contract tests).

Two levels. ``check_factory`` holds the construct-time rules the registry runs on every id when
it is first made: they read the class, so they cost microseconds and need nothing installed
beyond the harness's own module. ``check_harness`` is the full behaviour suite (reset, step,
determinism, order, bounds) on two live instances: 0.02 s for ``desktop`` but 3.3 s for
``browser`` and ``miniwob`` (each launches two browsers), and it would need the browser on the
driver, which only builds hosts. So it runs in contract tests and ``vlrl check harness ID``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from vlrl.harness.actions import Action
from vlrl.harness.base import Harness
from vlrl.harness.errors import ActionError, HarnessError
from vlrl.harness.observation import Observation
from vlrl.registry import ContractError, PluginSpec


class HarnessContractError(ContractError, AssertionError):
    """A harness that breaks the contract; ``rule`` names the broken rule."""


def check_factory(spec: PluginSpec, factory: Callable[..., Any]) -> None:
    """The registry's check of ``spec``: every rule of ``factory_rules``."""
    for _ in factory_rules(factory):
        pass


def factory_rules(factory: Callable[..., Any]) -> Iterator[str]:
    """The construct-time rules of a harness class, yielding each name once it passed (a plain
    factory function has none: ``make`` checks what it builds)."""
    if not inspect.isclass(factory):
        return
    _expect("harness class", issubclass(factory, Harness), f"{factory.__qualname__} does not subclass vlrl Harness")
    abstract = sorted(getattr(factory, "__abstractmethods__", ()))
    _expect("harness class", not abstract, f"{factory.__qualname__} leaves {abstract} abstract")
    yield "harness class"
    tasks = factory.tasks
    _expect(
        "task names",
        isinstance(tasks, tuple) and all(isinstance(t, str) and t for t in tasks) and len(set(tasks)) == len(tasks),
        f"tasks={tasks!r}; expected a tuple of distinct non-empty strings",
    )
    yield "task names"
    _expect("thread_bound", isinstance(factory.thread_bound, bool), f"{factory.thread_bound!r}; expected a bool")
    yield "thread_bound"


def check_harness(factory: Callable[[], Harness], *, seeds: tuple[int, ...] = (0, 1)) -> None:
    """Run the contract on fresh instances from ``factory``; raise ``HarnessContractError``."""
    for _ in contract(factory, seeds=seeds):
        pass


def contract(factory: Callable[[], Harness], *, seeds: tuple[int, ...] = (0, 1)) -> Iterator[str]:
    """Run the rules (types, determinism, tasks, order, bounds) in turn, yielding each name once it passed."""
    first, second = factory(), factory()
    try:
        _check_types(first)
        yield "types"
        _check_determinism(first, second, seeds)
        yield "determinism"
        _check_tasks(first)
        yield "tasks"
        _check_order(first)
        yield "order"
        _check_bounds(first)
        yield "bounds"
    finally:
        first.close()
        second.close()
        first.close()  # close is idempotent


def _expect(rule: str, condition: bool, detail: str) -> None:
    if not condition:
        raise HarnessContractError(rule, detail)


def _check_types(harness: Harness) -> None:
    result = harness.reset(seed=0)
    _expect("types", isinstance(result, tuple) and len(result) == 2, "reset must return (observation, info)")
    obs, info = result
    _expect("types", isinstance(obs, Observation), f"reset must return an Observation, got {type(obs).__name__}")
    _expect("types", isinstance(info, dict), "reset info must be a dict")
    step = harness.step(Action.wait())
    shape = "step must return (obs, reward, terminated, truncated, info)"
    _expect("types", isinstance(step, tuple) and len(step) == 5, shape)
    obs, reward, terminated, truncated, info = step
    _expect("types", isinstance(obs, Observation), "step must return an Observation")
    _expect("types", isinstance(reward, float) and math.isfinite(reward), f"reward must be a finite float: {reward!r}")
    _expect("types", isinstance(terminated, bool) and isinstance(truncated, bool), "terminated/truncated must be bools")
    _expect("types", isinstance(info, dict), "step info must be a dict")
    _expect("types", isinstance(info.get("success"), bool), "step info must say if the task is solved: info['success']")


def _check_determinism(first: Harness, second: Harness, seeds: tuple[int, ...]) -> None:
    for seed in seeds:
        a, _ = first.reset(seed=seed)
        b, _ = second.reset(seed=seed)
        _expect(
            "determinism",
            np.array_equal(a.screenshot, b.screenshot) and a.goal == b.goal,
            f"reset(seed={seed}) must give the same first observation on two instances",
        )


def _check_tasks(harness: Harness) -> None:
    for task in harness.tasks:
        obs, _ = harness.reset(seed=3, options={"task": task})
        _expect("tasks", obs.goal is not None, f"task {task!r}: the observation must state the goal")
    try:
        harness.reset(seed=0, options={"task": "no-such-task"})
    except (HarnessError, ValueError) as error:
        _expect("tasks", "no-such-task" in str(error), "an unknown task error must name the task")
    else:
        raise HarnessContractError("tasks", "reset with an unknown task must raise HarnessError or ValueError")


def _check_order(harness: Harness) -> None:
    harness.reset(seed=0)
    _, _, terminated, _, _ = harness.step(Action.fail("checker"))
    _expect("order", terminated, "a fail action must terminate the episode")
    try:
        harness.step(Action.wait())
    except HarnessError:
        pass
    else:
        raise HarnessContractError("order", "step after the episode ended must raise HarnessError until reset")


def _check_bounds(harness: Harness) -> None:
    obs, _ = harness.reset(seed=0)
    try:
        harness.step(Action.click(obs.width + 5, 0))
    except ActionError as error:
        _expect("bounds", str(obs.width + 5) in str(error), "an out-of-screen action error must name the coordinate")
    else:
        raise HarnessContractError("bounds", "a click outside the screenshot must raise ActionError")
