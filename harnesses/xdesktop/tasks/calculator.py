"""Calculator families on Galculator: the evaluators read a saved file or Galculator's own config.

``calc-compute-to-file`` puts Galculator (left) next to Mousepad (right) on an empty named file;
the agent computes a seeded integer expression, carries the result over (Galculator's
``ctrl+c`` copies the display value, a click into Mousepad focuses it, ``ctrl+v`` pastes) and
saves. The check parses the saved file as one number and compares it to the true value.
Galculator takes keys as presses of its buttons and ignores a key pressed again within about
100 ms, so the oracle types the expression in runs without a repeated character.

``calc-setting`` asks for one setting (the mode, the number base, the angle unit or the
notation). Galculator keeps its settings in ``~/.config/galculator/galculator.conf``, and writes
that file only when it quits (File > Quit, ``ctrl+q``; the window manager has no close button
binding and a killed Galculator saves nothing). So the setup writes the starting config, the goal
says to quit Galculator when done, and the check reads the key Galculator wrote:

    mode                    0 basic, 1 scientific, 2 paper
    default_number_base     0 DEC, 1 HEX, 2 OCT, 3 BIN      (scientific mode only)
    default_angle_base      0 DEG, 1 RAD, 2 GRAD            (scientific mode only)
    default_notation_mode   0 algebraic, 1 RPN, 2 formula   (scientific mode only)

The oracle switches the mode through the View menu with keys (``f10`` opens the menu bar) and
the others by clicking their label on Galculator's display (window-relative points).
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harnesses.xdesktop.session import XSession
from harnesses.xdesktop.tasks.base import Episode, read_text, wait_for_window, window_geometry
from harnesses.xdesktop.tasks.files import APP_TIMEOUT_S
from harnesses.xdesktop.words import WORDS
from vlrl.harness import Action, HarnessError

CONF = Path(".config/galculator/galculator.conf")
"""Galculator's config file, relative to the home folder."""
GALCULATOR_TITLE = "^galculator$"
CALCULATOR_AT = (10, 40)
"""Where ``calc-compute-to-file`` puts Galculator's frame (basic mode is about 330 x 370)."""
MARGIN = 10
"""Pixels between the two windows and from the screen's edges."""


def editor_area(session: XSession, calculator: int) -> tuple[int, int, tuple[int, int]]:
    """Where and how big Mousepad goes: right of Galculator, filling the rest of the screen
    (so both are visible and clickable at any screen size the harness takes)."""
    x, y, width, _ = window_geometry(session, calculator)
    left = x + width + 2 * MARGIN
    return left, CALCULATOR_AT[1], (session.width - left - 2 * MARGIN, session.height - CALCULATOR_AT[1] - 4 * MARGIN)


def galculator_conf(**general: int) -> str:
    """A starting config: Galculator reads the ``[general]`` keys given and defaults the rest."""
    keys = {
        "mode": 0,
        "default_number_base": 0,
        "default_angle_base": 1,
        "default_notation_mode": 0,
        **general,
    }
    return "[general]\n\n" + "".join(f"{key}={value}\n" for key, value in keys.items())


def read_conf(session: XSession) -> dict[str, str]:
    """The ``[general]`` keys of Galculator's config file (empty when it is missing)."""
    keys: dict[str, str] = {}
    section = None
    for line in (read_text(session.home / CONF) or "").splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "general" and "=" in line:
            key, value = line.split("=", 1)
            keys[key.strip()] = value.strip()
    return keys


def launch_galculator(session: XSession, **general: int) -> int:
    """Start Galculator from a fresh config and return its window."""
    (session.home / CONF).parent.mkdir(parents=True, exist_ok=True)
    (session.home / CONF).write_text(galculator_conf(**general))
    session.launch(["galculator"])
    return wait_for_window(session, GALCULATOR_TITLE, timeout_s=APP_TIMEOUT_S)


def place(session: XSession, window: int, x: int, y: int, size: tuple[int, int] | None = None) -> None:
    """Move a window's frame to ``(x, y)`` (and ask for a client-area size), waiting until it is
    there."""
    args = ["xdotool", "windowmove", str(window), str(x), str(y)]
    if size is not None:
        args += ["windowsize", str(window), str(size[0]), str(size[1])]
    subprocess.run(args, check=False, env=session.env(), capture_output=True, timeout=10)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        cx, cy, cw, ch = window_geometry(session, window)
        # The client sits inside the frame: a border on the left, the title bar above.
        # A toolkit may keep a window above its minimum size: only where it sits is waited for.
        if 0 <= cx - x <= 10 and 0 <= cy - y <= 40:
            return
        time.sleep(0.05)
    raise HarnessError(f"window {window} did not move to ({x}, {y}) on {session.display}")


def at(window: int, dx: int, dy: int) -> Callable[[XSession], Action]:
    """An oracle step: a click at ``(dx, dy)`` inside the window's client area, wherever it is."""

    def click(session: XSession) -> Action:
        x, y, _, _ = window_geometry(session, window)
        return Action.click(x + dx, y + dy)

    return click


# -- calc-compute-to-file


def expression(rng: random.Random) -> tuple[str, int]:
    """A seeded integer expression in the keys Galculator takes, and its value."""
    a, b, c = rng.randint(12, 99), rng.randint(3, 49), rng.randint(2, 999)
    return rng.choice(
        (
            (f"{a}*{b}+{c}", a * b + c),
            (f"{a}*{b}-{c}", a * b - c),
            (f"{c}+{a}*{b}", c + a * b),
            (f"({a}+{c})*{b}", (a + c) * b),
            (f"{c}-{a}*{b}", c - a * b),
        )
    )


def distinct_runs(text: str) -> list[str]:
    """``text`` cut into runs without a repeated character: Galculator ignores a key pressed again
    within about 100 ms (``11`` typed at once reads as ``1``), and each action ends with the
    screen settling, which takes longer."""
    runs = [""]
    for char in text:
        if char in runs[-1]:
            runs.append("")
        runs[-1] += char
    return runs


def number(text: str | None) -> float | None:
    """The one number a file holds (surrounding blanks allowed), or None."""
    try:
        return float((text or "").strip())
    except ValueError:
        return None


class ComputeToFile:
    """Compute an expression in Galculator and save its result into a file in Mousepad."""

    name = "calc-compute-to-file"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        text, value = expression(rng)
        path = session.home / "Documents" / f"{rng.choice(WORDS)}.txt"
        path.write_text("")
        calculator = launch_galculator(session)
        place(session, calculator, *CALCULATOR_AT)
        session.launch(["mousepad", str(path)])
        editor = wait_for_window(session, "Mousepad", timeout_s=APP_TIMEOUT_S)
        place(session, editor, *editor_area(session, calculator))

        def check(session: XSession) -> bool:
            result = number(read_text(path))
            return result is not None and abs(result - value) < 1e-9

        return Episode(
            family=self.name,
            goal=(
                f"Use the calculator to compute {text}, then put the result (the number only) into the "
                f'file "{path.name}" open in the text editor, and save it.'
            ),
            check=check,
            oracle=(
                at(calculator, 160, 50),  # focus Galculator: a click on its display
                *(Action.type(chunk) for chunk in distinct_runs(f"{text}=")),
                Action.key("ctrl", "c"),  # Edit > Copy Display Value
                at(editor, 120, 160),  # focus Mousepad's text (near its left edge: on screen at any size)
                Action.key("ctrl", "v"),
                Action.key("ctrl", "s"),
            ),
        )


# -- calc-setting


@dataclass(frozen=True, slots=True)
class Setting:
    """One Galculator setting an episode asks for."""

    wording: str
    """What the goal asks, e.g. 'switch to scientific mode'."""
    key: str
    value: int
    start: dict[str, int]
    """The starting config (the setting's other value, and the mode it is reachable in)."""
    steps: tuple[str, ...] | tuple[int, int]
    """Keys through the View menu, or the window-relative point of the display label to click."""


_VIEW_MENU = ("f10", "right", "right")
SETTINGS = (
    Setting(
        "switch to Scientific Mode",
        "mode",
        1,
        {"mode": 0},
        (*_VIEW_MENU, "down", "down", "enter"),
    ),
    Setting(
        "switch to Paper Mode",
        "mode",
        2,
        {"mode": 0},
        (*_VIEW_MENU, "down", "down", "down", "enter"),
    ),
    Setting("switch to Basic Mode", "mode", 0, {"mode": 1}, (*_VIEW_MENU, "down", "enter")),
    Setting(
        "switch the number base to hexadecimal (HEX)",
        "default_number_base",
        1,
        {"mode": 1},
        (65, 92),
    ),
    Setting(
        "switch the number base to octal (OCT)",
        "default_number_base",
        2,
        {"mode": 1},
        (97, 92),
    ),
    Setting(
        "switch the number base to binary (BIN)",
        "default_number_base",
        3,
        {"mode": 1},
        (127, 92),
    ),
    Setting(
        "switch the angle unit to degrees (DEG)",
        "default_angle_base",
        0,
        {"mode": 1},
        (170, 92),
    ),
    Setting(
        "switch the angle unit to gradians (GRAD)",
        "default_angle_base",
        2,
        {"mode": 1},
        (241, 92),
    ),
    Setting(
        "switch to reverse Polish notation (RPN)",
        "default_notation_mode",
        1,
        {"mode": 1},
        (322, 92),
    ),
)
"""Label points measured on Galculator 2.1.4's scientific window (Debian's default GTK theme)."""


class ChangeSetting:
    """Change one of Galculator's settings and quit it, so it writes its config file."""

    name = "calc-setting"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        setting = rng.choice(SETTINGS)
        window = launch_galculator(session, **setting.start)
        if isinstance(setting.steps[0], str):
            steps = [Action.key(key) for key in setting.steps]
        else:
            steps = [at(window, *setting.steps)]

        def check(session: XSession) -> bool:
            return read_conf(session).get(setting.key) == str(setting.value)

        return Episode(
            family=self.name,
            goal=(
                f"In Galculator, {setting.wording}. Then quit Galculator from its File menu, "
                "so that it saves the setting."
            ),
            check=check,
            oracle=(*steps, Action.key("ctrl", "q")),
        )
