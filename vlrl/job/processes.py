"""Every process a run starts ends with it, however the run ends (SIGTERM, SIGINT, an error).

A local Ray started by the run is a tree under the driver: its servers (GCS, raylet, dashboard,
monitors), the raylet's two agents (DashboardAgent, RuntimeEnvAgent) and workers, and under the
loop hosts the agent programs, each in a session of its own. Ray's own teardown does not reach
all of them: a SIGTERM while ``ray.init`` runs ended the driver with both agents still running
(they ignore SIGTERM, and their raylet was gone), and a SIGTERM later reached Ray's C++ handler,
which aborts the driver past every ``finally``. So, for the run's life (``run_processes``):

1. The driver is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a process of the run whose
   parent dies is re-parented to the driver, not to init, so it stays a descendant to find.
2. SIGTERM raises ``SystemExit(143)`` in the driver's main thread, as SIGINT raises
   ``KeyboardInterrupt``: every stage unwinds through its ``finally``, the session closes and Ray
   shuts down. ``handle_sigterm`` installs it again after ``ray.init``, which sets Ray's own.
3. On the way out, every descendant that started during the run and is still alive gets
   SIGTERM, then SIGKILL after ``grace_s``, and is reaped. Processes the driver had before the
   run (a test's own servers, a Ray it joined) are left alone.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psutil

_PR_SET_CHILD_SUBREAPER = 36
"""``prctl`` option (linux/prctl.h): orphaned descendants are re-parented to this process."""

TERMINATED = 128 + signal.SIGTERM
"""The exit status of a run ended by SIGTERM (a shell's convention for a signalled process)."""


def _on_sigterm(signum: int, frame: object) -> None:
    print("vlrl: SIGTERM; ending the run and every process it started", file=sys.stderr, flush=True)
    raise SystemExit(TERMINATED)


def handle_sigterm() -> None:
    """SIGTERM ends the run as SIGINT does (``SystemExit`` in the main thread, so every ``finally``
    runs). Call it again after ``ray.init``: Ray installs its own handlers there. Off the main
    thread (a run started from a thread) signals are not this run's to handle."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def _set_subreaper(on: bool) -> bool:
    """Whether this process is now (or no longer) a child subreaper; False where Linux's prctl is not."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _descendants() -> dict[tuple[int, float], psutil.Process]:
    """This process's descendants, by (pid, start time): a pid alone may be reused."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        with suppress(psutil.Error):
            found[(process.pid, process.create_time())] = process
    return found


def end_new_descendants(before: set[tuple[int, float]], grace_s: float = 5.0) -> list[str]:
    """SIGTERM every descendant not in ``before``, SIGKILL those alive ``grace_s`` later, reap them
    all; returns the names of those that needed SIGKILL."""
    left = [p for key, p in _descendants().items() if key not in before]
    for process in left:
        with suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(left, timeout=grace_s)
    killed = []
    for process in alive:
        with suppress(psutil.Error):
            killed.append(process.name())
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return killed


@contextmanager
def run_processes(*, grace_s: float = 5.0) -> Iterator[None]:
    """The run's processes end with it (steps 1-3 of the module docstring)."""
    before = set(_descendants())
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM)
    subreaper = _set_subreaper(True)
    handle_sigterm()
    try:
        yield
    finally:
        try:
            end_new_descendants(before, grace_s)
        finally:
            if subreaper:
                _set_subreaper(False)
            if main:
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
