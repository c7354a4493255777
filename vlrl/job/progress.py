"""The progress display of a training job: one status line for the phase it is in, with its rate and ETA.

    [rl 12/40 30% 03:05<07:11, 15.42s/step] episodes in flight 16 | groups 52 acc, 11 rej, 3 drop, 0 fail | train 11.2k tok/s | store 4.1 MB (130 keys) | pass 0.47 | eval 0.62

A run goes through phases: collecting demonstrations, warm-start steps, RL steps, evaluation
episodes. Each counts its units towards a known total; tqdm's meter turns the count and the
phase's clock into the rate (the average since the phase began) and the time left. After the
head come figures the job gives when it knows them (training throughput, pass rate, evaluation)
and live ones a probe polls (episodes in flight in the Harness Pool, the driver's group books,
the store's bytes). On a terminal the line is rewritten in place every ``refresh_s``, and a
phase's last line stays on screen when the next phase begins. Elsewhere (a log file, CI) every
update is a line of its own: each phase start, each ``show()``, each ``interval_s`` of waiting,
and advances, at most ``lines_per_phase`` of them a phase.

The API, for the job and for code that runs a phase's units (evaluation episodes)::

    progress.phase("rl", total=40, unit="step", initial=12)    # the current phase from now on
    progress.advance(tokens_per_s=1.1e4)                       # one unit done, with this phase's figures
    with progress.phase("eval step10", total=128, unit="episode"):         # inside another phase:
        outcomes = await asyncio.gather(*(progress.counted(c) for c in runs))  # one unit per awaitable
    # ... here "rl" is the current phase again, its count and clock as they were
    progress.set(eval=0.62)                                    # a figure of the whole run
    progress.show()                                            # print the line now

Call these from the job's event loop (any of its coroutines), not from other threads. Figures
given to ``advance`` belong to the phase and go with it; those given to ``set`` stay for the run.
The job opens each evaluation's phase itself (``eval TAG``, ``len(sources) * eval.episodes``
episodes, around ``evaluate()``): the code that runs the episodes only advances it, once per
finished episode (``progress.advance()``, or each ``pool.run(...)`` wrapped in ``progress.counted``).
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TextIO, TypeVar

from tqdm import tqdm
from tqdm.utils import disp_trim

from vlrl.config import Ge, Gt

T = TypeVar("T")


class Phase:
    """A stretch of the run counted in ``unit``s towards ``total``; a context manager that, on
    exit, makes the phase that was current before it current again."""

    def __init__(
        self, progress: Progress, name: str, total: int | None, unit: str, initial: int, outer: Phase | None
    ) -> None:
        self.name, self.total, self.unit, self.outer = name, total, unit, outer
        self.initial = self.n = initial
        self.fields: dict[str, Any] = {}
        self.start = time.monotonic()
        self._progress = progress

    def head(self) -> str:
        """``[name n/total pct elapsed<left, rate]``, by tqdm's meter (the rate counts from ``initial``)."""
        known = bool(self.total) and self.n <= self.total
        if known:
            form = "[{desc} {n_fmt}/{total_fmt} {percentage:.0f}% {elapsed}<{remaining}, {rate_fmt}]"
        else:
            form = "[{desc} {n_fmt} {elapsed}, {rate_fmt}]" if self.n > self.initial else "[{desc} {elapsed}]"
        meter = tqdm.format_meter(
            self.n, self.total if known else None, time.monotonic() - self.start, prefix=self.name,
            unit=self.unit, bar_format=form, initial=self.initial,
        )  # fmt: skip
        return " ".join(meter.split())  # tqdm pads the rate to 5 characters

    def __enter__(self) -> Phase:
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress._end(self)


class Progress:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """The status line printed while the job runs."""

        enabled: bool = True
        """Print the status line at all (the final JSON summary is printed regardless)."""

        interval_s: Annotated[float, Gt(0)] = 15.0
        """Not on a terminal: a line is also printed every this many seconds, so that a log shows
        the job alive while it waits on rollouts or a training step."""

        refresh_s: Annotated[float, Gt(0)] = 1.0
        """On a terminal: seconds between redraws of the line (elapsed time, ETA, live figures)."""

        lines_per_phase: Annotated[int, Ge(1)] = 50
        """Not on a terminal: at most this many lines from a phase's advances (every unit when
        its total is smaller; a phase without a total prints every advance)."""

    def __init__(self, config: Progress.Config, *, stream: TextIO | None = None) -> None:
        self.config = config
        self.stream = stream or sys.stderr
        self.fields: dict[str, Any] = {}
        self.probe: Callable[[], dict[str, Any]] = dict
        self.current = Phase(self, "setup", None, "step", 0, outer=None)
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._print = tqdm.status_printer(self.stream)
        self._drawn = False  # a terminal line is on screen, not yet ended
        self._task: asyncio.Task[None] | None = None

    def phase(self, name: str, total: int | None = None, unit: str = "step", *, initial: int = 0) -> Phase:
        """Start the phase ``name`` of ``total`` units (None: unknown), ``initial`` of them done."""
        self._end_line()
        self.current = Phase(self, name, total, unit, initial, outer=self.current)
        self.show()
        return self.current

    def advance(self, n: int = 1, **fields: Any) -> None:
        """``n`` more units of the current phase are done; ``fields``: its figures now."""
        phase = self.current
        before, phase.n = phase.n, phase.n + n
        phase.fields.update(fields)
        if self._tty or self._line_due(phase, before):
            self.show()

    async def counted(self, awaitable: Awaitable[T]) -> T:
        """``awaitable``'s result, advancing the current phase by one when it comes."""
        result = await awaitable
        self.advance()
        return result

    def set(self, **fields: Any) -> None:
        """Figures of the whole run (shown in every phase until set again)."""
        self.fields.update(fields)

    def show(self) -> None:
        """Print the line now: in place on a terminal, else as a new line."""
        if not self.config.enabled:
            return
        line = self.line()
        if self._tty:
            self._print(_fit(line, self.stream))
            self._drawn = True
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def line(self) -> str:
        f = {**self.fields, **_safe(self.probe), **self.current.fields}
        parts = []
        if "in_flight" in f:
            parts.append(f"episodes in flight {f['in_flight']}")
        if "accepted" in f:
            parts.append(
                f"groups {f['accepted']} acc, {f.get('rejected', 0)} rej, {f.get('dropped', 0)} drop, {f.get('failed', 0)} fail"
            )
        if "loss" in f:
            parts.append(f"loss {f['loss']:.3f}")
        if "tokens_per_s" in f:
            parts.append(f"train {_si(f['tokens_per_s'])} tok/s")
        if "store_bytes" in f:
            parts.append(f"store {_bytes(f['store_bytes'])} ({f.get('store_keys', 0)} keys)")
        if "pass_rate" in f:
            parts.append(f"pass {f['pass_rate']:.2f}")
        if "eval" in f:
            parts.append(f"eval {f['eval']:.2f}")
        return " ".join([self.current.head(), " | ".join(parts)]).rstrip()

    def _end(self, phase: Phase) -> None:
        if self.current is phase:
            self._end_line()
            self.current = phase.outer
            self.show()

    def _end_line(self) -> None:
        """On a terminal, keep the line drawn so far and start a fresh one."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._print = tqdm.status_printer(self.stream)
            self._drawn = False

    def _line_due(self, phase: Phase, before: int) -> bool:
        if phase.total is None or phase.n >= phase.total:
            return True
        every = max(1, math.ceil((phase.total - phase.initial) / self.config.lines_per_phase))
        return (phase.n - phase.initial) // every > (before - phase.initial) // every

    async def __aenter__(self) -> Progress:
        if self.config.enabled:
            self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._end_line()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.config.refresh_s if self._tty else self.config.interval_s)
            self.show()


def _fit(line: str, stream: TextIO) -> str:
    """The line cut to the terminal's width: a wrapped line cannot be rewritten in place."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):  # not a real terminal (a test's stream)
        return line
    return disp_trim(line, columns - 1)


def _safe(probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return probe()
    except Exception:  # a figure that cannot be read now (an actor restarting) is left out
        return {}


def _si(value: float) -> str:
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
