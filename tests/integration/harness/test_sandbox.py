"""The bubblewrap sandbox on its own: what a program inside sees and may do, its limits, freezing,
and that ``close`` leaves nothing. Each check would fail on the host (``sandbox='none'``)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import psutil
import pytest

from vlrl.harness.sandbox import Limits, SandboxLimitError, SandboxUnavailable, check_available, open_sandbox
from vlrl.harness.sandbox import bubblewrap
from vlrl.harness.sandbox.folders import instance_folder, remove_folder

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture
def box():
    root = instance_folder("vlrl-sandbox-test-")
    sandbox = open_sandbox(
        "bubblewrap", f"{os.getpid()}-{root.name}", shared=[root / "box"], limits=Limits(memory_mb=128, processes=32, disk_mb=8)
    )
    yield sandbox, root / "box"
    sandbox.close()
    remove_folder(root)


def _run(sandbox, box: Path, script: str, timeout: float = 30) -> str:
    log = box / f"log-{time.monotonic_ns()}"
    sandbox.spawn(["sh", "-c", script], env=ENV, cwd=box, log=log).wait(timeout=timeout)
    return log.read_text()


def test_inside_is_an_unprivileged_user_that_sees_only_the_system_and_its_box(box):
    sandbox, folder = box
    out = _run(sandbox, folder, "id -u; grep CapEff /proc/self/status; ls /; ls /proc | grep -c '^[0-9]'; "
               "touch /etc/x 2>&1; touch /usr/x 2>&1; echo hi > inside.txt")  # fmt: skip
    lines = out.splitlines()
    assert lines[0] == "65534" and lines[1].split()[1] == "0" * 16
    assert not {"root", "home", "work", "opt", "mnt"} & set(lines), lines
    assert int(lines[lines.index("var") + 1]) < 10  # its own pids only
    assert out.count("Read-only file system") == 2
    assert (folder / "inside.txt").read_text() == "hi\n" and (folder / "inside.txt").stat().st_uid == 65534


def test_nothing_inside_holds_the_nodes_environment(monkeypatch):
    monkeypatch.setenv("VLRL_NODE_SECRET", "api-key")  # as a node's AWS_/WANDB_ keys would be
    root = instance_folder("vlrl-sandbox-test-")
    sandbox = open_sandbox("bubblewrap", f"{os.getpid()}-{root.name}", shared=[root / "box"])
    try:
        out = _run(sandbox, root / "box", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c VLRL_NODE_SECRET")
        assert out.strip() == "0"
    finally:
        sandbox.close()
        remove_folder(root)


def test_no_network_but_its_own_loopback(box):
    sandbox, folder = box
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    out = _run(sandbox, folder, f"(echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo refused")
    listener.close()
    assert out.strip() == "refused"


def test_the_process_limit_refuses_forks_and_is_reported(box):
    sandbox, folder = box
    sandbox.check()
    _run(sandbox, folder, "for i in $(seq 60); do sleep 5 & done 2>/dev/null; true")
    with pytest.raises(SandboxLimitError, match="processes limit hit") as hit:
        sandbox.check()
    assert hit.value.limit == "processes"
    sandbox.check()  # reported once


def test_the_memory_limit_kills_inside_and_is_reported(box):
    sandbox, folder = box
    _run(sandbox, folder, "head -c 400m /dev/zero | tail > /dev/null")
    with pytest.raises(SandboxLimitError, match="memory limit hit"):
        sandbox.check()


def test_the_box_is_a_size_limited_file_system(box):
    sandbox, folder = box
    # The log is in the full box too, so dd's exit status says it was stopped, not its message.
    dd = sandbox.spawn(["dd", "if=/dev/zero", "of=fill", "bs=1M", "count=64"], env=ENV, cwd=folder, log=folder / "log")
    assert dd.wait(timeout=30) != 0
    assert (folder / "fill").stat().st_size <= 8 << 20


def test_freeze_stops_the_tree_and_thaw_resumes_it(box):
    sandbox, folder = box
    process = sandbox.spawn(["sh", "-c", "while :; do echo x >> ticks; sleep 0.05; done"], env=ENV, cwd=folder, log=folder / "log")
    time.sleep(0.5)
    sandbox.freeze()
    time.sleep(0.2)
    frozen = (folder / "ticks").read_text().count("x")
    time.sleep(0.5)
    assert (folder / "ticks").read_text().count("x") == frozen
    sandbox.thaw()
    time.sleep(0.5)
    assert (folder / "ticks").read_text().count("x") > frozen
    assert sandbox.usage().processes >= 2 and sandbox.usage().memory_bytes > 0
    process.kill()


def test_close_ends_everything_it_started(box):
    sandbox, folder = box
    _run(sandbox, folder, "setsid sleep 300 > /dev/null 2>&1 & nohup sleep 300 > /dev/null 2>&1 &")
    deadline = time.monotonic() + 10  # the two may still be on their way to exec'ing sleep
    while len(inside := [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "300"]]) < 2:
        assert time.monotonic() < deadline, inside
        time.sleep(0.02)
    sandbox.close()
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in inside):
        assert time.monotonic() < deadline, "a process outlived its sandbox"
        time.sleep(0.05)


def test_a_machine_without_bubblewrap_is_told_what_is_missing_and_how_to_turn_it_off(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    bubblewrap.unavailable.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match=r"`bwrap` is not installed \(Debian package bubblewrap.*sandbox='none'"):
            check_available("xdesktop", "bubblewrap")
    finally:
        monkeypatch.undo()
        bubblewrap.unavailable.cache_clear()
    check_available("xdesktop", "bubblewrap")
