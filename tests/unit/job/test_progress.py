"""The progress line: each phase's count, rate and ETA (driven by a fake clock), the job's and the
probe's figures, one line per update off a terminal, in-place rewrites on one."""

from __future__ import annotations

import asyncio
import io
import types

import pytest

from vlrl.job import progress as progress_module
from vlrl.job.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress_module, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


def screen(text: str) -> list[str]:
    """What a terminal shows: each line as its last carriage return left it."""
    return [line.rsplit("\r", 1)[-1].rstrip() for line in text.split("\n") if line.rsplit("\r", 1)[-1].strip()]


@pytest.mark.parametrize(
    ("total", "initial", "done", "seconds", "unit", "head"),
    [
        (10, 0, 4, 8, "step", "[warm-start 4/10 40% 00:08<00:12, 2.00s/step]"),  # 0.5 step/s, 6 left
        (40, 10, 3, 30, "step", "[warm-start 13/40 32% 00:30<04:30, 10.00s/step]"),  # the rate counts from initial
        (200, 0, 100, 20, "episode", "[warm-start 100/200 50% 00:20<00:20, 5.00episode/s]"),
        (None, 0, 5, 10, "step", "[warm-start 5 00:10, 2.00s/step]"),  # no total: no ETA
    ],
)
def test_a_phase_shows_its_count_rate_and_time_left(clock, total, initial, done, seconds, unit, head):
    stream = io.StringIO()
    progress = Progress(Progress.Config(), stream=stream)
    progress.phase("warm-start", total=total, unit=unit, initial=initial)
    clock.now += seconds
    progress.advance(done)
    assert stream.getvalue().splitlines()[-1] == head


def test_before_the_first_unit_the_eta_is_unknown(clock):
    stream = io.StringIO()
    Progress(Progress.Config(), stream=stream).phase("rl", total=40, initial=12)
    assert stream.getvalue() == "[rl 12/40 30% 00:00<?, ?step/s]\n"


def test_off_a_terminal_every_update_is_one_line_and_counts_only_grow(clock):
    stream = io.StringIO()
    progress = Progress(Progress.Config(), stream=stream)
    progress.phase("rl", total=5)
    for _ in range(5):
        clock.now += 3
        progress.advance(tokens_per_s=2000.0)
    progress.show()
    text = stream.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) == 1 + 5 + 1  # the phase start, each step, the explicit show
    counts = [int(line.split()[1].split("/")[0]) for line in lines]
    assert counts == [0, 1, 2, 3, 4, 5, 5]
    assert lines[-2] == "[rl 5/5 100% 00:15<00:00, 3.00s/step] train 2.0k tok/s"


def test_off_a_terminal_a_long_phase_prints_at_most_lines_per_phase(clock):
    stream = io.StringIO()
    progress = Progress(Progress.Config(lines_per_phase=10), stream=stream)
    progress.phase("demonstrations", total=95, unit="episode")
    for _ in range(95):
        progress.advance()
    lines = stream.getvalue().splitlines()
    assert [int(line.split()[1].split("/")[0]) for line in lines] == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95]


def test_on_a_terminal_the_line_is_rewritten_in_place_and_a_finished_phase_stays(clock):
    stream = Terminal()
    progress = Progress(Progress.Config(), stream=stream)
    progress.phase("warm-start", total=3)
    for _ in range(3):
        clock.now += 1
        progress.advance(loss=0.25)
    assert "\n" not in stream.getvalue() and stream.getvalue().count("\r") == 4
    progress.phase("rl", total=2)
    clock.now += 4
    progress.advance()
    assert screen(stream.getvalue()) == [
        "[warm-start 3/3 100% 00:03<00:00, 1.00step/s] loss 0.250",
        "[rl 1/2 50% 00:04<00:04, 4.00s/step]",
    ]


def test_a_nested_phase_gives_the_outer_one_back_with_its_count_clock_and_figures(clock):
    stream = io.StringIO()
    progress = Progress(Progress.Config(), stream=stream)
    progress.phase("rl", total=10)
    clock.now += 10
    progress.advance(pass_rate=0.5)
    with progress.phase("eval step1", total=4, unit="episode"):
        clock.now += 2
        progress.advance(2)
        progress.set(eval=0.75)
    lines = stream.getvalue().splitlines()
    assert lines[-2] == "[eval step1 2/4 50% 00:02<00:02, 1.00episode/s]"  # the rl figures are not eval's
    assert lines[-1] == "[rl 1/10 10% 00:12<01:48, 12.00s/step] pass 0.50 | eval 0.75"


def test_counted_advances_once_per_awaitable_as_each_finishes(clock):
    stream = io.StringIO()
    progress = Progress(Progress.Config(), stream=stream)
    progress.phase("eval base", total=3, unit="episode")

    async def episode(i: int) -> int:
        await asyncio.sleep(0.01 * i)
        return i

    async def main() -> list[int]:
        return await asyncio.gather(*(progress.counted(episode(i)) for i in (3, 1, 2)))

    assert asyncio.run(main()) == [3, 1, 2]  # results in order, counted as they came
    assert [line.split()[2] for line in stream.getvalue().splitlines()] == ["0/3", "1/3", "2/3", "3/3"]


def test_the_line_shows_live_figures_and_survives_a_failing_probe(clock):
    stream = io.StringIO()
    progress = Progress(Progress.Config(), stream=stream)
    progress.phase("rl", total=40, initial=11)
    progress.set(eval=0.62)
    progress.probe = lambda: {"in_flight": 16, "accepted": 52, "rejected": 11, "dropped": 3, "failed": 0,
                              "store_bytes": 4.3 * 2**20, "store_keys": 130}  # fmt: skip
    progress.advance(tokens_per_s=11234.0, pass_rate=0.47)
    line = stream.getvalue().splitlines()[-1]
    for part in ("[rl 12/40", "] episodes in flight 16", "groups 52 acc, 11 rej, 3 drop, 0 fail",
                 "train 11.2k tok/s", "store 4.3 MB (130 keys)", "pass 0.47", "eval 0.62"):  # fmt: skip
        assert part in line, line

    def broken() -> dict:
        raise ConnectionError("actor restarting")

    progress.probe = broken
    progress.show()
    last = stream.getvalue().splitlines()[-1]
    assert "pass 0.47" in last and "in flight" not in last


def test_a_disabled_line_prints_nothing(clock):
    quiet = io.StringIO()
    progress = Progress(Progress.Config(enabled=False), stream=quiet)
    progress.phase("rl", total=2)
    progress.advance()
    progress.show()
    assert quiet.getvalue() == ""


def test_while_waiting_a_line_is_printed_every_interval():
    stream = io.StringIO()
    progress = Progress(Progress.Config(interval_s=0.01), stream=stream)

    async def main() -> None:
        async with progress:
            progress.phase("rl", total=2)
            # wait for three lines (a bound, not a race: a loaded machine only makes it slower)
            deadline = asyncio.get_running_loop().time() + 60
            while len(stream.getvalue().splitlines()) < 3:
                assert asyncio.get_running_loop().time() < deadline, stream.getvalue()
                await asyncio.sleep(0.01)

    asyncio.run(main())
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.startswith("[rl 0/2") for line in lines)
