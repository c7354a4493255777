"""The xdesktop harness on the Harness Pool: 64 oracle episodes on two env hosts, one of them
killed mid-run, and afterwards no X server, window manager, application or sandbox folder left
on the machine that was not there before."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import psutil

from vlrl.pool import HarnessPool, HostBudget, HostConfig, ScriptedEpisode

PROGRAMS = ("Xvfb", "openbox", "mousepad", "galculator", "xterm", "pcmanfm")
SETTINGS = {"width": 640, "height": 480, "tasks": ["editor-write-save"], "max_steps": 6}


def _desktop_processes() -> set[int]:
    found = set()
    for process in psutil.process_iter(["name", "status"]):
        if process.info["name"] in PROGRAMS and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.add(process.pid)
    return found


def _sandboxes() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("vlrl-xdesktop-*"))


def test_64_episodes_and_a_killed_env_host_leave_nothing_behind(ray_session):
    ray = ray_session
    before_processes, before_folders = _desktop_processes(), _sandboxes()
    pool = HarnessPool.Config(
        budget=HostBudget(total_hosts=3, shares={"loop": 1, "xdesktop": 2}),
        loop_host=HostConfig(max_tenants=64),
        env_host=HostConfig(max_tenants=3, threads=4),
        max_attempts=3,
    ).build()
    try:

        async def main():
            jobs = [(ScriptedEpisode(seed=1000 + i, max_steps=6), {"codebase": "xdesktop", "env_settings": SETTINGS}) for i in range(64)]
            run = asyncio.ensure_future(pool.run_many(jobs))
            while pool.book.ok < 8:
                await asyncio.sleep(0.1)
            ray.kill(pool.envs["xdesktop"].hosts()[0], no_restart=True)
            return await run

        outcomes = asyncio.run(main())
        assert [o.status for o in outcomes] == ["ok"] * 64
        assert all(o.value.success for o in outcomes)
        assert pool.book.env_host_deaths == 1 and pool.book.balanced()
    finally:
        pool.shutdown()
    deadline = time.monotonic() + 60  # bounded, not timed: a loaded machine only polls longer
    while (_desktop_processes() - before_processes or _sandboxes() - before_folders) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _desktop_processes() - before_processes == set()
    assert _sandboxes() - before_folders == set()
