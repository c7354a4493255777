"""Closing frees every process an instance started; instances live on one thread each."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from harnesses.browser import BrowserHarness
from tests.helpers.play import play
from vlrl.harness import Action, HarnessError


def _running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still running (an exited, unreaped zombie is not)."""
    running = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
        except psutil.NoSuchProcess:
            pass
    return running


def test_close_leaves_no_browser_processes():
    """The processes an instance spawned, not a system-wide count of chromium processes: other
    suites (MiniWoB) run Chromium too, and their browsers must not make this test flaky."""
    me = psutil.Process()
    before = {process.pid for process in me.children(recursive=True)}
    harness = BrowserHarness()
    harness.reset(seed=0)
    spawned = [process for process in me.children(recursive=True) if process.pid not in before]
    assert sum("chrom" in process.name() for process in spawned) >= 2  # browser + renderer at least
    harness.close()
    harness.close()
    deadline = time.monotonic() + 60  # bounded, not timed: a loaded machine only polls longer
    while _running(spawned) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(spawned)
    with pytest.raises(HarnessError, match="closed"):
        harness.reset(seed=0)


def test_runs_on_a_dedicated_thread():
    """As on an env host: built, used and closed by one thread that is not the main thread."""
    outcome: dict[str, object] = {}

    def host() -> None:
        try:
            harness = BrowserHarness(tasks=["email-triage"])
            try:
                harness.reset(seed=4)
                outcome["rewards"] = [reward for _, reward, *_ in play(harness)]
            finally:
                harness.close()
        except BaseException as error:  # reported to the test's thread below
            outcome["error"] = error

    thread = threading.Thread(target=host, name="browser-env")
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["rewards"][-1] == 1.0


def test_refuses_calls_from_another_thread(harness):
    harness.reset(seed=0)
    errors: list[BaseException] = []

    def intruder() -> None:
        for call in (lambda: harness.reset(seed=1), lambda: harness.step(Action.wait()), harness.close):
            try:
                call()
            except HarnessError as error:
                errors.append(error)

    thread = threading.Thread(target=intruder)
    thread.start()
    thread.join(timeout=30)
    assert len(errors) == 3 and all("thread" in str(error) for error in errors)
    harness.step(Action.wait())  # still fine from its own thread
