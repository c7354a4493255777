"""Light harnesses for pool tests: real blocking work (sleep on the env host's threads), a tiny
screen, skewed episode lengths drawn from the seed, and faults on demand."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from vlrl.harness import Action, Harness, HarnessError, Observation, StepResult

SIZE = (48, 64)


class LightHarness(Harness):
    tasks = ("reach",)

    def __init__(self, *, step_s: float = 0.01, long_every: int = 0, long_steps: int = 10,
                 crash_seed: int | None = None, open_dir: str | None = None) -> None:
        self.step_s = step_s
        self.long_every = long_every
        self.long_steps = long_steps
        self.crash_seed = crash_seed
        self._marker = Path(open_dir, f"{os.getpid()}-{id(self)}") if open_dir else None
        if self._marker is not None:
            self._marker.touch()
        self._steps_left: int | None = None
        self._seed = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict]:
        task = (options or {}).get("task", "reach")
        if task not in self.tasks:
            raise HarnessError(f"unknown task {task!r}; expected one of {list(self.tasks)}")
        self._seed = seed or 0
        long = self.long_every and self._seed % self.long_every == 0
        self._steps_left = self.long_steps if long else 2
        return self._obs(), {"task": task, "pid": os.getpid()}

    def step(self, action: Action) -> StepResult:
        if self._steps_left is None:
            raise HarnessError("step before reset, or after the episode ended")
        action.check_bounds(SIZE[1], SIZE[0])
        if self.crash_seed is not None and self._seed == self.crash_seed:
            raise RuntimeError(f"harness exploded on seed {self._seed}")
        time.sleep(self.step_s)  # blocking work, as a real environment's I/O would be
        self._steps_left -= 1
        done = self._steps_left <= 0 or action.kind in ("done", "fail")
        success = self._steps_left <= 0 and action.kind != "fail"
        if done:
            self._steps_left = None
        return self._obs(), float(success), done, False, {"task": "reach", "success": success, "pid": os.getpid()}

    def oracle(self) -> Action | None:
        return Action.click(1, 1)

    def close(self) -> None:
        if self._marker is not None and self._marker.exists():
            self._marker.unlink()

    def _obs(self) -> Observation:
        pixels = np.full((*SIZE, 3), self._seed % 251, dtype=np.uint8)
        return Observation(screenshot=pixels, goal="reach the end")


class OtherLightHarness(LightHarness):
    """A second codebase for tests that need two env pools."""


class HangingLightHarness(LightHarness):
    """Thread-bound (each instance on its own thread, as sync Playwright): a step of the episode
    of ``hang_seed`` blocks ``hang_s`` seconds, past the env host's call timeout, and the close
    that releasing the broken instance queues behind it on that thread times out too."""

    thread_bound = True

    def __init__(self, *, hang_seed: int | None = None, hang_s: float = 2.0, **settings: Any) -> None:
        super().__init__(**settings)
        self.hang_seed = hang_seed
        self.hang_s = hang_s

    def step(self, action: Action) -> StepResult:
        if self.hang_seed is not None and self._seed == self.hang_seed:
            time.sleep(self.hang_s)
        return super().step(action)
