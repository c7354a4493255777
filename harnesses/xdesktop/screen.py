"""Screenshots of a session's display, and waiting for the screen to settle after an action.

An action's effect lands a few frames later (an app redraws, a dialog maps), so a fixed sleep is
either slow or wrong. Instead the harness samples the screen until it has not changed for
``quiet_s`` (no new damage), capped at ``max_wait_s``; the last frame is the observation.
"""

from __future__ import annotations

import time

import numpy as np
from PIL import ImageGrab


def grab(display: str) -> np.ndarray:
    """The display's whole screen as canonical RGB ``uint8`` ``[H, W, 3]``."""
    return np.ascontiguousarray(np.asarray(ImageGrab.grab(xdisplay=display).convert("RGB")))


def settle(display: str, *, quiet_s: float = 0.15, max_wait_s: float = 3.0, poll_s: float = 0.03) -> np.ndarray:
    """The screen once no pixel changed for ``quiet_s`` (or at ``max_wait_s``)."""
    deadline = time.monotonic() + max_wait_s
    last = grab(display)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        frame = grab(display)
        if not np.array_equal(frame, last):
            last, since = frame, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last
