"""``vlrl bench scale``'s stage clock: each span charged once, to the innermost stage, and a
metered coroutine charged only for its own steps, never for the time it waits."""

from __future__ import annotations

import asyncio

import pytest

from vlrl.bench.scale_meter import StageClock, metered_call, metered_coroutine


class Ticks:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


def test_a_nested_stage_pauses_the_one_it_runs_in(ticks):
    clock = StageClock(cpu=ticks, wall=ticks)
    ticks.now = 5  # before any stage: nobody's
    with clock.stage("grading"):
        ticks.now += 1
        with clock.stage("hook"):
            ticks.now += 2
        ticks.now += 3
    ticks.now += 7  # after: nobody's
    assert clock.snapshot() == {
        "grading": {"cpu_s": 4, "wall_s": 4, "spans": 1},
        "hook": {"cpu_s": 2, "wall_s": 2, "spans": 1},
    }


def test_a_metered_call_returns_and_raises_as_the_call_would(ticks):
    clock = StageClock(cpu=ticks, wall=ticks)

    def work(x: int) -> int:
        ticks.now += x
        if x > 5:
            raise ValueError(x)
        return x * 10

    call = metered_call(clock, "hook", work)
    assert call(2) == 20
    with pytest.raises(ValueError):
        call(6)
    assert clock.snapshot()["hook"] == {"cpu_s": 8, "wall_s": 8, "spans": 2}


def test_a_metered_coroutine_is_charged_for_its_steps_not_for_its_waits(ticks):
    clock = StageClock(cpu=ticks, wall=ticks)
    gate: asyncio.Event

    async def run() -> str:
        ticks.now += 1
        await gate.wait()  # suspended: the other task moves the clock meanwhile
        ticks.now += 2
        return "done"

    async def elsewhere() -> None:
        ticks.now += 100
        gate.set()

    async def main() -> str:
        nonlocal gate
        gate = asyncio.Event()
        result, _ = await asyncio.gather(metered_coroutine(clock, "launch", run()), elsewhere())
        return result

    assert asyncio.run(main()) == "done"
    charged = clock.snapshot()["launch"]
    assert charged["cpu_s"] == charged["wall_s"] == 3
    assert charged["spans"] == 2  # one span per step between awaits


def test_cancelling_a_metered_coroutine_reaches_the_coroutine(ticks):
    clock = StageClock(cpu=ticks, wall=ticks)
    seen = []

    async def run() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> None:
        task = asyncio.ensure_future(metered_coroutine(clock, "launch", run()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled"]
