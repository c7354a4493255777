"""``DesktopHarness``: episodes of the task families on a synthetic desktop drawn with Pillow.

An episode is a scene of plain widget objects built from the seed; every step applies one typed
action to it, re-renders it and checks the family's goal on the widget state. Episodes end on
success, when the goal can no longer be reached (a wrong button, a wrong menu item...), on
``done``/``fail``, or by truncation after ``max_steps``.
"""

from __future__ import annotations

import copy
import random
from typing import Any, ClassVar

from vlrl.harness import Action, ActionError, Harness, HarnessError, Observation, StepResult

from harnesses.desktop.elements import elements
from harnesses.desktop.interaction import apply
from harnesses.desktop.render import render
from harnesses.desktop.scene import Scene
from harnesses.desktop.settings import DesktopSettings
from harnesses.desktop.style import Metrics, Palette
from harnesses.desktop.tasks import FAMILIES, Task


class DesktopHarness(Harness):
    """Takes the ``DesktopSettings`` fields as keyword arguments (``width``, ``height``, ``tasks``,
    ``max_steps``, ``distractors``)."""

    tasks: ClassVar[tuple[str, ...]] = tuple(FAMILIES)
    Config: ClassVar[type[DesktopSettings]] = DesktopSettings
    """The settings' defaults, where the checker and the Gymnasium ids read them."""

    def __init__(self, **settings: Any) -> None:
        self.settings = DesktopSettings(**settings)
        self._metrics = Metrics.for_screen(self.settings.width, self.settings.height)
        self._rng = random.Random()
        self._task: Task | None = None
        self._steps = 0
        self._ended = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        """Same seed and options, same episode; without a seed the previous stream goes on."""
        if seed is not None:
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise ValueError(f"reset seed={seed!r}; expected an int or None")
            self._rng = random.Random(seed)
        name = self._task_name(options or {})
        s, rng = self.settings, self._rng
        clock = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        scene = Scene(s.width, s.height, self._metrics, Palette.pick(rng), clock)
        self._task = FAMILIES[name](rng, scene, s.distractors)
        self._steps, self._ended = 0, False
        return self._observe(), {"task": name, "success": False}

    def step(self, action: Action) -> StepResult:
        task = self._running()
        if not isinstance(action, Action):
            raise ActionError(f"step expects a vlrl.harness.Action, got {type(action).__name__}")
        action.check_bounds(self.settings.width, self.settings.height)
        hit = apply(task.scene, action)
        self._steps += 1
        success = action.kind != "fail" and task.solved()
        terminated = success or action.kind in ("done", "fail") or task.failed()
        truncated = not terminated and self._steps >= self.settings.max_steps
        self._ended = terminated or truncated
        info = {"task": task.name, "success": success, "hit": hit, "steps": self._steps}
        return self._observe(), float(success), terminated, truncated, info

    def fork(self) -> DesktopHarness:
        """A copy of this instance, its episode and random stream included: the scene is plain
        widget objects, so a deep copy is the same state; the fonts (``Metrics``, read-only) are
        shared, not copied."""
        twin = copy.copy(self)
        twin._rng = copy.deepcopy(self._rng)
        twin._task = copy.deepcopy(self._task, {id(self._metrics): self._metrics})
        return twin

    def oracle(self) -> Action:
        """The scripted policy's next action from the current state (a mid-episode start included)."""
        return self._running().oracle()

    @property
    def episode(self) -> Task | None:
        """The current episode's task and widget state (for tests and analysis; agents get pixels)."""
        return self._task

    def close(self) -> None:
        self._task = None

    def _task_name(self, options: dict[str, Any]) -> str:
        unknown = sorted(set(options) - {"task"})
        if unknown:
            raise ValueError(f"reset options {unknown} are unknown; the desktop harness takes only 'task'")
        name = options.get("task")
        if name is None:
            return self._rng.choice(self.settings.families)
        if name not in FAMILIES:
            raise ValueError(f"reset task {name!r} is not a desktop task family; expected one of {list(FAMILIES)}")
        return name

    def _running(self) -> Task:
        if self._task is None:
            raise HarnessError("desktop harness: step before reset (or after close); call reset first")
        if self._ended:
            raise HarnessError("desktop harness: the episode has ended; call reset before stepping again")
        return self._task

    def _observe(self) -> Observation:
        scene = self._task.scene
        return Observation(screenshot=render(scene), goal=self._task.goal, elements=elements(scene))
