"""``XDesktopHarness``: real applications on a real X desktop, tasks checked by their real state.

Each instance owns one ``XSession`` (its own Xvfb display, openbox, sandbox home). A reset ends
the last episode's applications, makes the home folder afresh, and lets the task family set up
files and launch applications; a step sends the action through XTest (``xdotool``) and returns
the screen once it has settled. The reward is the family's evaluator on the real state (the
saved file, the folder, the application's config), read after every step and never shown to the
agent. The instance is ``thread_bound``: its processes die with the thread that started them.

Its programs run in a sandbox (``sandbox='bubblewrap'``, ``vlrl.harness.sandbox``): a typed
command line runs as an unprivileged user that sees only the session's box and the read-only
system, with no network and with memory, process and disk limits. A limit hit ends the episode
as a failure naming the limit (``SandboxLimitError``), and the pool replaces the instance.
``sandbox='none'`` runs them on the node, with one warning.

It is a ``real_desktop``: system chords and typed command lines are refused before they reach the
session (``vlrl.harness.key_policy``). The ``allow_chords`` setting lets named chords through
(``["alt+tab"]``), ``guard_actions=False`` turns the rules off, and a terminal family lets its
typed lines end in a newline (``Episode.commands``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from numbers import Integral
from typing import Any

from harnesses.xdesktop.input import perform
from harnesses.xdesktop.screen import settle
from harnesses.xdesktop.session import XSession, check_packages
from harnesses.xdesktop.tasks import FAMILIES, Episode
from vlrl.harness import Action, ActionError, Harness, HarnessError, Observation, StepResult, int_setting, task_names
from vlrl.harness.key_policy import KeyPolicy, chord_setting
from vlrl.harness.sandbox import check_available, limits_setting, require, sandbox_setting

NEEDED = ("isolates_files", "isolates_network", "isolates_processes")
WANTED = ("limits_memory", "limits_processes", "limits_disk")
"""A shell reaches the policy: a sandbox that cannot isolate is refused; one that cannot limit
(not a root node) is used with a warning."""

WIDTH_RANGE = (640, 3840)
HEIGHT_RANGE = (480, 2160)


class XDesktopHarness(Harness):
    tasks = tuple(FAMILIES)
    thread_bound = True
    real_desktop = True

    def __init__(
        self,
        *,
        width: int = 1280,
        height: int = 720,
        tasks: Sequence[str] | None = None,
        max_steps: int = 15,
        allow_chords: Sequence[str] = (),
        guard_actions: bool = True,
        sandbox: str = "bubblewrap",
        sandbox_memory_mb: int = 1024,
        sandbox_processes: int = 256,
        sandbox_disk_mb: int = 256,
    ) -> None:
        self.width = int_setting("xdesktop", "width", width, *WIDTH_RANGE)
        self.height = int_setting("xdesktop", "height", height, *HEIGHT_RANGE)
        self.max_steps = int_setting("xdesktop", "max_steps", max_steps, 1, 10_000)
        self.allow_chords = chord_setting("xdesktop", "allow_chords", allow_chords)
        if not isinstance(guard_actions, bool):
            raise ValueError(f"xdesktop harness setting guard_actions={guard_actions!r}; expected True or False")
        self.guard_actions = guard_actions
        if tasks is not None:
            self.tasks = task_names("xdesktop", tasks, tuple(FAMILIES))
        check_packages()
        self.sandbox = sandbox_setting("xdesktop", sandbox)
        self.limits = limits_setting(
            "xdesktop", memory_mb=sandbox_memory_mb, processes=sandbox_processes, disk_mb=sandbox_disk_mb
        )
        check_available("xdesktop", self.sandbox)
        self._rng = random.Random()
        self._episode: Episode | None = None
        self._oracle_step = 0
        self._steps = 0
        self._ended = False
        self._session: XSession | None = XSession(self.width, self.height, sandbox=self.sandbox, limits=self.limits)
        if self.sandbox != "none":
            try:
                require("xdesktop", self._session.sandbox, NEEDED, WANTED)
            except BaseException:
                self.close()
                raise

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        session = self._usable()
        family = self._requested_family(options)
        if seed is not None:
            if not isinstance(seed, Integral) or isinstance(seed, bool):
                raise ValueError(f"seed={seed!r}; expected an int or None")
            self._rng = random.Random(int(seed))
        name = family or self._rng.choice(self.tasks)
        self._episode = None
        session.kill_apps()
        session.fresh_home()
        session.park_pointer()
        episode = FAMILIES[name].setup(self._rng, session)
        self._episode, self._oracle_step, self._steps, self._ended = episode, 0, 0, False
        observation = self._observe()
        session.sandbox.check()
        return observation, {"task": name}

    def step(self, action: Action) -> StepResult:
        episode, session = self._active()
        if not isinstance(action, Action):
            raise ActionError(f"step expects a vlrl Action, got {type(action).__name__}")
        action.check_bounds(self.width, self.height)
        perform(session.env(), action)
        self._steps += 1
        observation = self._observe()
        session.sandbox.check()
        solved = bool(episode.check(session))
        terminated = solved or action.kind in ("done", "fail")
        truncated = not terminated and self._steps >= self.max_steps
        self._ended = terminated or truncated
        info = {"task": episode.family, "success": solved, "steps": self._steps}
        return observation, float(solved), terminated, truncated, info

    def oracle(self) -> Action | None:
        episode, session = self._active()
        if self._oracle_step >= len(episode.oracle):
            return Action.done()
        step = episode.oracle[self._oracle_step]
        self._oracle_step += 1
        return step if isinstance(step, Action) else step(session)

    def key_policy(self) -> KeyPolicy | None:
        if not self.guard_actions:
            return None
        return KeyPolicy(allowed=self.allow_chords, commands=self._episode is not None and self._episode.commands)

    def close(self) -> None:
        session, self._session, self._episode = self._session, None, None
        if session is not None:
            session.close()

    def processes(self) -> list:
        """The instance's live processes (X server, window manager, applications)."""
        return [] if self._session is None else self._session.processes()

    def _observe(self) -> Observation:
        return Observation(screenshot=settle(self._session.display), goal=self._episode.goal if self._episode else None)

    def _requested_family(self, options: dict[str, Any] | None) -> str | None:
        options = options or {}
        unknown = set(options) - {"task"}
        if unknown:
            raise ValueError(f"reset options {sorted(unknown)} are unknown; the xdesktop harness takes 'task'")
        family = options.get("task")
        if family is not None and family not in self.tasks:
            raise ValueError(f"task {family!r} is not one of this harness's tasks {list(self.tasks)}")
        return family

    def _usable(self) -> XSession:
        if self._session is None:
            raise HarnessError("the xdesktop harness is closed")
        return self._session

    def _active(self) -> tuple[Episode, XSession]:
        session = self._usable()
        if self._episode is None:
            raise HarnessError("no episode: call reset() before step() or oracle()")
        if self._ended:
            raise HarnessError("the episode has ended (terminated or truncated): call reset() first")
        return self._episode, session

