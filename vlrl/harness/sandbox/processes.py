"""Host processes a harness starts: whether one is alive, and ending one with its process group."""

from __future__ import annotations

import os
import signal
import subprocess


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(process: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """SIGKILL ``process``'s process group (it was started in a session of its own) and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
