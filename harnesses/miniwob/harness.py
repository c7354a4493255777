"""The MiniWoB++ harness: the package's task pages in one headless Chromium per instance.

Reward is MiniWoB's own, passed through: 0.0 until the page ends the episode, then its
``env_reward`` in [-1, 1] (a success is scaled by the wall-clock time left, ``1 - elapsed /
limit``; some tasks give partial credit). ``info["raw_reward"]`` is the same outcome without
the time decay and ``info["success"]`` is ``raw_reward > 0``. Saying ``done`` or ``fail`` before
the page ended the episode counts as running out of time: reward -1.

Two suites of pages (``suite``): ``"oracle"``, the default, offers the tasks the scripted oracle
solves, which a training source's warm start needs; ``"all"`` offers every page the miniwob
package bundles, an evaluation suite where ``oracle()`` is None on the pages without a script and
reward and success are MiniWoB's own as everywhere.

MiniWoB's clock is wall time (10 s for most tasks) and keeps running while the policy thinks;
``time_limit_s`` lengthens it for slow policies (the decay then runs over the longer limit). An
episode that ran out between steps ends at the next step, whose action then lands on MiniWoB's
inert end screen.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any, Literal

import numpy as np
from miniwob.constants import TASK_HEIGHT, TASK_WIDTH
from PIL import Image

from harnesses.miniwob.actions import perform, to_screen
from harnesses.miniwob.browser import TASK_NAMES, MiniWoBBrowser
from harnesses.miniwob.oracle import POLICIES
from vlrl.config import ConfigError, Ge, Gt, Le, NonEmpty, validate
from vlrl.harness import Action, Harness, HarnessError, Observation, StepResult
from vlrl.harness.sandbox import Limits, check_available

DEFAULT_TASKS: tuple[str, ...] = tuple(POLICIES)
"""Simple tasks the oracle solves, so every default task has a demonstration."""
SUITES: dict[str, tuple[str, ...]] = {"oracle": DEFAULT_TASKS, "all": TASK_NAMES}
"""The pages of each ``suite``: the oracle's tasks, or every page the miniwob package bundles."""


@dataclass(slots=True)
class _Episode:
    task: str
    goal: str
    steps: int = 0
    over: bool = False


class MiniWoBHarness(Harness):
    """MiniWoB++ tasks in headless Chromium; actions are in pixels of the upscaled screenshot.

    ``thread_bound`` is False: Selenium talks HTTP to ChromeDriver, so any thread may drive an
    instance, though never two at once (env hosts lease an instance to one tenant at a time).
    """

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Settings of one MiniWoB harness instance (what ``vlrl.harness.make("miniwob", ...)`` takes)."""

        suite: Literal["oracle", "all"] = "oracle"
        """The pages this instance runs when ``tasks`` is None: "oracle", those the scripted oracle
        solves (a training source's warm start needs its demonstrations); "all", every page the
        miniwob package bundles (an evaluation suite; ``oracle()`` is None where it has no script)."""
        tasks: Annotated[tuple[str, ...], NonEmpty()] | None = None
        """MiniWoB task names (``click-button``, ``login-user``, ..., any bundled page) this instance
        runs; None: the ``suite``'s pages."""
        scale: Annotated[int, Ge(1), Le(8)] = 2
        """Integer upscaling of the 160x210 task screenshot, by pixel repetition."""
        max_steps: Annotated[int, Ge(1)] = 20
        """Steps before an episode is truncated."""
        time_limit_s: Annotated[float, Gt(0)] | None = None
        """MiniWoB's wall-clock episode limit; None keeps each task's own (10 s for most)."""
        sandbox: Literal["bubblewrap", "none"] = "bubblewrap"
        """Where Chromium runs: "bubblewrap", a sandbox as an unprivileged user with its own
        sandbox on (``vlrl.harness.sandbox``); "none", on the node (one warning a process)."""
        sandbox_memory_mb: Annotated[int, Ge(256)] = 2048
        """Memory of the sandbox's whole process tree (and its box); past it the kernel kills
        inside and the episode fails naming the limit."""
        sandbox_processes: Annotated[int, Ge(64)] = 1024
        """Tasks (threads count) the sandbox may hold."""
        sandbox_disk_mb: Annotated[int, Ge(64)] = 512
        """Size of the sandbox's box (Chromium's profile), a tmpfs."""

        def check(self) -> None:
            unknown = [task for task in self.tasks or () if task not in TASK_NAMES]
            if unknown:
                expected = f"MiniWoB task names, such as {list(DEFAULT_TASKS)}"
                raise ConfigError("tasks", self.tasks, expected, hint=f"unknown: {unknown}")

        def build(self) -> MiniWoBHarness:
            return MiniWoBHarness(**asdict(self))

    tasks = DEFAULT_TASKS
    thread_bound = False
    browser: MiniWoBBrowser
    """The page this instance drives; tests and debugging read its DOM and processes through it."""

    def __init__(self, **settings: Any) -> None:
        """``settings`` are the fields of ``MiniWoBHarness.Config``."""
        self.config = validate(MiniWoBHarness.Config(**settings))
        self.tasks = self.config.tasks or SUITES[self.config.suite]
        self.width = TASK_WIDTH * self.config.scale
        self.height = TASK_HEIGHT * self.config.scale
        self._rng = random.Random()
        self._episode: _Episode | None = None
        check_available("miniwob", self.config.sandbox)
        limits = Limits(
            memory_mb=self.config.sandbox_memory_mb,
            processes=self.config.sandbox_processes,
            disk_mb=self.config.sandbox_disk_mb,
        )
        self.browser = MiniWoBBrowser(sandbox=self.config.sandbox, limits=limits)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode. ``seed`` seeds the task draw and is itself MiniWoB's page seed (as in
        the miniwob gym env); ``options={"task": name}`` picks one of ``tasks`` instead."""
        self._episode = None
        options = dict(options or {})
        task = options.pop("task", None)
        if options:
            raise HarnessError(f"reset options {sorted(options)} are unknown; MiniWoB takes only 'task'")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise HarnessError(f"reset seed={seed!r}; expected an int or None")
        if seed is not None:
            self._rng.seed(seed)
        drawn = self.tasks[self._rng.randrange(len(self.tasks))]
        page_seed = seed if seed is not None else self._rng.getrandbits(31)
        task = drawn if task is None else task
        if task not in self.tasks:
            raise HarnessError(f"task {task!r} is not one of this instance's tasks {list(self.tasks)}")
        self.browser.open(task)
        limit_ms = None if self.config.time_limit_s is None else round(self.config.time_limit_s * 1000)
        self.browser.begin(page_seed, limit_ms)
        self._episode = _Episode(task=task, goal=self.browser.utterance())
        info = {"task": task, "seed": page_seed, "time_limit_s": self.browser.time_limit_s()}
        observation = self._observe()
        self.browser.sandbox.check()
        return observation, info

    def step(self, action: Action) -> StepResult:
        episode = self._episode
        if episode is None:
            raise HarnessError("step() before reset(): start an episode first")
        if episode.over:
            raise HarnessError("step() after the episode ended (terminated or truncated): call reset()")
        action.check_bounds(self.width, self.height)
        if action.kind in ("done", "fail"):
            self.browser.end(-1.0, f"agent said {action.kind}")
        elif action.kind == "wait":
            time.sleep(action.seconds)
        else:
            perform(self.browser.driver, action, self.config.scale)
        episode.steps += 1
        self.browser.sandbox.check()
        status = self.browser.status()
        terminated = bool(status["done"])
        truncated = not terminated and episode.steps >= self.config.max_steps
        episode.over = terminated or truncated
        reward = float(status["env_reward"]) if terminated else 0.0
        raw = float(status["raw_reward"]) if terminated else 0.0
        info = {
            "task": episode.task,
            "steps": episode.steps,
            "raw_reward": raw,
            "success": raw > 0,
            "reason": status["reason"],
        }
        return self._observe(), reward, terminated, truncated, info

    def oracle(self) -> Action | None:
        """The scripted next action for the default tasks (``oracle.POLICIES``), in screenshot
        pixels; None for other tasks, outside an episode, or in a state the script does not know."""
        episode = self._episode
        if episode is None or episode.over or episode.task not in POLICIES:
            return None
        action = POLICIES[episode.task](episode.goal, self.browser.dom())
        if action is None or action.x is None:
            return action
        x, y = to_screen(action.x, action.y, self.config.scale)
        return replace(action, x=x, y=y)

    def close(self) -> None:
        self._episode = None
        self.browser.close()

    def _observe(self) -> Observation:
        shot = self.browser.screenshot().resize((self.width, self.height), Image.Resampling.NEAREST)
        return Observation(screenshot=np.asarray(shot), goal=self._episode.goal)
