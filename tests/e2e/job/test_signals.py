"""Every process of a ``vlrl train`` run is gone after SIGTERM or SIGINT (issue 52): Ray's servers,
its two agents (DashboardAgent and RuntimeEnvAgent survived a SIGTERM during ``ray.init``), its
workers, and the agent programs the loop hosts started, each in a session of its own (here
``sleep``, a program that never ends by itself).

The test follows the run's process tree while it runs (pid and start time of every descendant of
the driver, so a reused pid is not mistaken for a survivor), signals the driver at a chosen
moment, and then waits for all of them to be gone. Whether Ray leaves its agents depends on where
in ``ray.init`` the signal lands (by hand, once in three tries at this moment before the fix), so
``tests/integration/job/test_processes.py`` checks the mechanism itself: an orphan that ignores
SIGTERM is adopted and killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

RECIPE = "examples/train_own_agent.py:small"
HANG = "[sleep,300]"
"""The agent program: it never ends by itself and never calls its endpoint."""


class Tree:
    """The descendants of ``root`` seen so far, by (pid, start time)."""

    def __init__(self, root: int) -> None:
        self.root = psutil.Process(root)
        self.seen: dict[tuple[int, float], str] = {}

    def poll(self) -> None:
        try:
            children = self.root.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            try:
                self.seen.setdefault((child.pid, child.create_time()), " ".join(child.cmdline()) or child.name())
            except psutil.Error:
                pass

    def has(self, *words: str) -> bool:
        return any(word in line for line in self.seen.values() for word in words)

    def alive(self) -> list[str]:
        left = []
        for (pid, started), line in self.seen.items():
            try:
                process = psutil.Process(pid)
                if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{pid} {process.name()}: {line[:120]}")
            except psutil.Error:
                pass
        return left


def _signalled_run(tmp_path, sig: signal.Signals, *moment: str, after_s: float = 0.0) -> tuple[Tree, int, str]:
    """Start the run, signal it ``after_s`` after a descendant's command line first holds one of
    ``moment``, wait for it to end; return its tree, exit status and stderr."""
    command = [
        sys.executable, "-m", "vlrl.cli", "train", RECIPE,
        "--set", f"run_dir={tmp_path / 'run'}", "--set", "plots=false", "--set", "tensorboard=false",
        "--set", f"sources[0].external.command={HANG}", "--set", "pool.startup_timeout_s=600",
    ]  # fmt: skip
    err = (tmp_path / "stderr.txt").open("w")
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
    tree = Tree(driver.pid)
    try:
        deadline = time.monotonic() + 600
        while driver.poll() is None and not tree.has(*moment) and time.monotonic() < deadline:
            tree.poll()
            time.sleep(0.1)
        until = time.monotonic() + after_s
        while driver.poll() is None and time.monotonic() < until:
            tree.poll()
            time.sleep(0.1)
        assert driver.poll() is None, f"the run ended before {moment}: {(tmp_path / 'stderr.txt').read_text()[-2000:]}"
        tree.poll()
        driver.send_signal(sig)
        while driver.poll() is None and time.monotonic() < deadline:
            tree.poll()  # what starts while it ends is the run's too
            time.sleep(0.1)
        status = driver.wait(timeout=5)
    finally:
        if driver.poll() is None:
            driver.kill()
    return tree, status, (tmp_path / "stderr.txt").read_text()


def _gone(tree: Tree, within_s: float = 30.0) -> list[str]:
    deadline = time.monotonic() + within_s
    while tree.alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    return tree.alive()


def test_sigterm_while_ray_starts_leaves_no_process(tmp_path):
    # A second after the raylet has started its agents, while ray.init still runs: a SIGTERM here
    # ended the driver (Ray's handler: exit status 15) and left both agents running.
    tree, status, err = _signalled_run(tmp_path, signal.SIGTERM, "runtime_env/agent", "RuntimeEnvAgent", after_s=1.0)
    assert tree.has("raylet") and tree.has("dashboard/agent", "DashboardAgent"), tree.seen
    assert _gone(tree) == [], err[-3000:]
    assert status != 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_agent_programs_run_leaves_no_process(tmp_path, sig):
    # The held-out evaluation before RL runs the program: two `sleep 300`, in sessions of their own.
    tree, status, err = _signalled_run(tmp_path, sig, "sleep 300")
    assert tree.has("LoopHost") or tree.has("default_worker"), tree.seen
    assert _gone(tree) == [], err[-3000:]
    assert status != 0
