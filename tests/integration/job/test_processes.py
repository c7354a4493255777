"""``job.processes.run_processes``: what a run starts ends with it, what was there before stays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from vlrl.job.processes import TERMINATED, run_processes

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(1000)"
"""A process that ignores SIGTERM, as Ray's DashboardAgent and RuntimeEnvAgent did."""


def test_an_orphan_that_ignores_sigterm_is_adopted_and_killed_and_earlier_children_are_left():
    before = subprocess.Popen(["sleep", "1000"])  # the driver's own, from before the run
    try:
        with run_processes(grace_s=1.0):
            # A child starts a grandchild in a session of its own and exits: the grandchild is orphaned,
            # as the agents were when their raylet died. Without a subreaper it would go to init.
            spawn = f"import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {STUBBORN!r}], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True); p.stdout.readline(); print(p.pid)"
            orphan = psutil.Process(int(subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True, check=True).stdout))
            deadline = time.monotonic() + 10
            while orphan.ppid() != os.getpid() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert orphan.ppid() == os.getpid()  # adopted: still a descendant to find
        assert not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE
        assert before.poll() is None
    finally:
        before.kill()
        before.wait()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread only")
def test_sigterm_inside_a_run_raises_system_exit_143_and_the_handler_is_restored_after():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as ended:
        with run_processes(grace_s=1.0):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert ended.value.code == TERMINATED == 143
    assert signal.getsignal(signal.SIGTERM) is previous
