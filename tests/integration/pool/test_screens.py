"""Screens from a real env host actor to a tenant's session as tiles: the same observations a
local harness gives, bit for bit, named by their content hashes, a step's message a small
fraction of its screenshot, and a session that dropped its tiles gets the screen again whole."""

from __future__ import annotations

import asyncio
import pickle


from harnesses.desktop.harness import DesktopHarness
from vlrl.harness import Action, resolve
from vlrl.mm import content_hash
from vlrl.pool import HostConfig
from vlrl.pool.env_host import EnvHost
from vlrl.pool.screens import ShippedObservation, new_receiver
from vlrl.pool.tenant import EnvAssignment, EnvSession

SETTINGS = {"width": 640, "height": 480, "tasks": ("fill-form",), "max_steps": 100}
TYPED = "ada lovelace"


async def _blocking(fn, *args):
    return await asyncio.to_thread(fn, *args)


def _local_screens() -> list:
    env = DesktopHarness(**SETTINGS)
    shots = [env.reset(seed=3)[0].screenshot, env.step(env.oracle())[0].screenshot]
    return shots + [env.step(Action.type(c))[0].screenshot for c in TYPED]


def test_a_session_gets_the_local_harness_screens_exactly_from_a_fraction_of_the_bytes(ray_session):
    config = HostConfig(max_tenants=4, threads=2)
    host = config.start(EnvHost, "screens-host", 0, resolve("desktop"), config, 64)
    expected = _local_screens()

    async def play() -> tuple[list, list[int]]:
        await host.open.remote("t/0", SETTINGS)
        session = EnvSession(EnvAssignment(host, "desktop"), "t/0", _blocking)
        obs, _ = await session.reset(seed=3)
        shots, names, sizes = [obs.screenshot], [session.content_hash(obs.screenshot)], []
        oracle = await session.oracle()
        shots.append((await session.step(oracle))[0].screenshot)
        for i, char in enumerate(TYPED):
            if i == 5:  # the session drops every tile it held: the next screen is resent whole
                session._screens = new_receiver()
            shots.append((await session.step(Action.type(char)))[0].screenshot)
            names.append(session.content_hash(shots[-1]))
        assert session.content_hash(shots[-1].copy()) is None  # only the screen it assembled is named
        # What crosses for one more step, taken straight from the host (then assembled locally).
        raw, *_ = await host.step.remote("t/0", Action.type("!"))
        assert isinstance(raw, ShippedObservation)
        sizes.append(len(pickle.dumps(raw, protocol=5)))
        return shots, names, sizes

    try:
        shots, names, sizes = asyncio.run(play())
    finally:
        ray_session.kill(host)
    assert len(shots) == len(expected)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(shots, expected))
    # The env host's names of the screens are their content hashes: the loop need not hash them again.
    assert names == [content_hash(shot) for shot in [shots[0], *shots[2:]]]
    assert sizes[0] < expected[0].nbytes / 50


def test_a_host_without_tiles_sends_observations_whole(ray_session):
    config = HostConfig(max_tenants=4, threads=2)
    host = config.start(EnvHost, "whole-host", 0, resolve("desktop"), config, None)
    try:
        ray_session.get(host.open.remote("t/0", SETTINGS))
        obs, _ = ray_session.get(host.reset.remote("t/0", 3, None))
        assert obs.screenshot.tobytes() == _local_screens()[0].tobytes()
    finally:
        ray_session.kill(host)
