"""What an xdesktop task is: OSWorld's shape, a setup that makes real state and an evaluator
that reads real state back.

A family's ``setup(rng, session)`` writes the files of the episode into the session's fresh home
folder, launches the applications, and returns an ``Episode``: the goal in words, whether its
sandbox runs typed commands, the oracle's steps, and ``check``, which reads the resulting state
(a file's contents, a directory listing, an application's own config file, a window title) and
says whether the task is solved. An oracle step is an action, or a function of the live session
that gives one (where a window sits is only known at run time).
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harnesses.xdesktop.session import XSession
from vlrl.harness import Action, HarnessError

OracleStep = Action | Callable[[XSession], Action]


@dataclass(frozen=True, slots=True, kw_only=True)
class Episode:
    family: str
    """The task family's name."""
    goal: str
    """What the agent is asked to do, in words."""
    check: Callable[[XSession], bool]
    """Whether the session's real state solves the task."""
    oracle: Sequence[OracleStep]
    """A scripted solution, step by step."""
    commands: bool = False
    """Whether typed text may end a line (``KeyPolicy.commands``): only where the episode's terminal
    runs commands inside the sandbox."""


class Family(Protocol):
    name: str

    def setup(self, rng: random.Random, session: XSession) -> Episode: ...


def wait_for_window(session: XSession, name: str, *, timeout_s: float = 10.0) -> int:
    """The X window id of the first visible window whose title matches ``name`` (a regex), once
    it is mapped; a clear error when the application never shows it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["xdotool", "search", "--onlyvisible", "--name", name], env=session.env(), capture_output=True, text=True
        )
        ids = done.stdout.split()
        if ids:
            return int(ids[0])
        time.sleep(0.05)
    raise HarnessError(f"no window titled like {name!r} appeared on {session.display} within {timeout_s:.0f} s")


def window_geometry(session: XSession, window: int) -> tuple[int, int, int, int]:
    """``(x, y, width, height)`` of a window's client area on the screen, in screenshot pixels.

    ``xwininfo``'s absolute corner, not ``xdotool getwindowgeometry``: under a reparenting window
    manager xdotool adds the frame's offset twice (openbox: one pixel right, a title bar's 20 down).
    """
    done = subprocess.run(["xwininfo", "-id", str(window)], env=session.env(), capture_output=True, text=True)
    lines = (line.partition(":") for line in done.stdout.splitlines())
    fields = {key.strip(): value.strip() for key, _, value in lines}
    try:
        keys = ("Absolute upper-left X", "Absolute upper-left Y", "Width", "Height")
        return tuple(int(fields[key]) for key in keys)  # type: ignore[return-value]
    except (KeyError, ValueError):
        error = done.stderr.strip()[-300:]
        raise HarnessError(f"no geometry for window {window} on {session.display}: {error}") from None


def window_title(session: XSession, window: int) -> str:
    done = subprocess.run(["xdotool", "getwindowname", str(window)], env=session.env(), capture_output=True, text=True)
    return done.stdout.strip()


def read_text(path: Path) -> str | None:
    """A file's text, or None when it does not exist (or is not text)."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
