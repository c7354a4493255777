"""Nothing of an instance outlives it: ``close()`` ends the X server, the window manager and the
applications and removes the sandbox folder, and so does the death of the process that hosts it;
two instances never share a display or a folder."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import psutil

from harnesses.xdesktop import XDesktopHarness


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_gone(check, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_close_ends_every_process_and_removes_the_folder():
    first, second = XDesktopHarness(), XDesktopHarness()
    try:
        first.reset(seed=0)
        second.reset(seed=0)
        a, b = first._session, second._session
        assert a.display != b.display and a.root != b.root
        pids = [p.pid for p in [*first.processes(), *second.processes()]]
        assert len(pids) == 6  # Xvfb, openbox and the editor, twice
        roots = [a.root, b.root]
    finally:
        first.close()
        second.close()
    assert _wait_gone(lambda: not _alive(pids)), _alive(pids)
    assert not any(root.exists() for root in roots)


def test_a_process_started_in_a_session_of_its_own_ends_with_the_episode():
    harness = XDesktopHarness()
    try:
        harness.reset(seed=0)
        session = harness._session
        session.launch(["sh", "-c", "setsid sleep 300 > /dev/null 2>&1 &"]).wait(timeout=10)
        home = f"HOME={session.home}"

        def strays() -> list[int]:
            found = []
            for process in psutil.process_iter(["name"]):
                try:
                    if process.info["name"] == "sleep" and f"HOME={process.environ().get('HOME')}" == home:
                        found.append(process.pid)
                except psutil.Error:
                    pass
            return found

        assert _wait_gone(lambda: bool(strays()), 5)  # it runs, outside every process group we made
        harness.reset(seed=1)
        assert _wait_gone(lambda: not strays(), 5)
    finally:
        harness.close()


def _host(queue) -> None:
    harness = XDesktopHarness()
    harness.reset(seed=1)
    queue.put(([p.pid for p in harness.processes()], str(harness._session.root)))
    time.sleep(60)


def test_a_killed_host_leaves_no_process_and_no_folder():
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    host = context.Process(target=_host, args=(queue,))
    host.start()
    pids, root = queue.get(timeout=60)
    assert _alive(pids) and Path(root).exists()
    os.kill(host.pid, signal.SIGKILL)
    host.join()
    assert _wait_gone(lambda: not _alive(pids)), _alive(pids)
    assert _wait_gone(lambda: not Path(root).exists())
