"""A tenant's session assembles a small screen on the event loop and a large one on the host's
threads, both bit for bit the harness's screens (the env host called in process)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from harnesses.desktop.harness import DesktopHarness
from vlrl.harness import Action
from vlrl.pool import HostConfig
from vlrl.pool.env_host import EnvHost
from vlrl.pool.screens import INLINE_PIXELS
from vlrl.pool.tenant import EnvAssignment, EnvSession

TYPED = "ada"


class _InProcess:
    """An ``EnvHost`` called as a Ray actor handle is: ``await host.method.remote(*args)``."""

    def __init__(self, host: EnvHost) -> None:
        self._host = host

    def __getattr__(self, method: str) -> SimpleNamespace:
        async def remote(*args):
            return getattr(self._host, method)(*args)

        return SimpleNamespace(remote=remote)


def _local_screens(settings: dict) -> list:
    env = DesktopHarness(**settings)
    shots = [env.reset(seed=3)[0].screenshot, env.step(env.oracle())[0].screenshot]
    return shots + [env.step(Action.type(c))[0].screenshot for c in TYPED]


@pytest.mark.parametrize(("width", "height", "on_threads"), [(320, 240, 0), (1280, 720, 5)])
def test_screens_are_assembled_exactly_on_the_loop_when_small_and_on_threads_when_large(width, height, on_threads):
    assert (width * height <= INLINE_PIXELS) == (on_threads == 0)
    settings = {"width": width, "height": height, "tasks": ("fill-form",), "max_steps": 100}
    host = EnvHost(0, DesktopHarness, HostConfig(max_tenants=2, threads=2), screen_tile_px=64)
    handoffs = []

    async def run_blocking(fn, *args):
        handoffs.append(fn)
        return await asyncio.to_thread(fn, *args)

    async def play() -> list:
        session = EnvSession(EnvAssignment(_InProcess(host), "desktop", settings), "t/0", run_blocking, opened=False)
        shots = [(await session.reset(seed=3))[0].screenshot]
        shots.append((await session.step(await session.oracle()))[0].screenshot)
        for char in TYPED:
            shots.append((await session.step(Action.type(char)))[0].screenshot)
        return shots

    shots = asyncio.run(play())
    expected = _local_screens(settings)
    assert [s.tobytes() for s in shots] == [e.tobytes() for e in expected]
    assert len(handoffs) == on_threads  # one a screen when large, none when small
