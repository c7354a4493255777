"""Where the driver's thread spends its time, stage by stage, measured where the cost is paid.

The driver runs on one asyncio thread, so every piece of its work is a synchronous span on that
thread: a plain call (the accept-time hook), or one step of a coroutine between two awaits (a
pool run: leasing hosts, submitting the tenant, taking its outcome back). ``StageClock`` charges
each span's thread CPU time (``time.thread_time``) and wall time to the stage it runs in, and
only to the innermost one: a stage entered inside another (the hook inside grading's follow-up)
pauses the outer one, so stages never count a span twice and their sum is at most the thread's
own time. ``metered_call`` and ``metered_coroutine`` put a call or every step of a coroutine
under a stage; the bench wraps the driver's parts with them and changes nothing else.

Waiting (a coroutine suspended on a remote call, the event loop idle) is nobody's span: a stage's
wall time is the time it held the driver's thread, not its latency.

``process_figures`` reads a process's CPU seconds, RSS and open descriptors from ``/proc``.
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from vlrl.bench.proc_memory import memory_mb

T = TypeVar("T")
_TICK = os.sysconf("SC_CLK_TCK")


class StageClock:
    """Exclusive thread-CPU and wall seconds per stage, and how many spans each had."""

    def __init__(
        self, cpu: Callable[[], float] = time.thread_time, wall: Callable[[], float] = time.perf_counter
    ) -> None:
        """``cpu``, ``wall``: the clocks read at every stage boundary."""
        self.cpu_s: dict[str, float] = defaultdict(float)
        self.wall_s: dict[str, float] = defaultdict(float)
        self.spans: Counter[str] = Counter()
        self._clocks = (cpu, wall)
        self._stack: list[str] = []
        self._cpu = self._wall = 0.0

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Charge the time until the block ends to ``name`` (pausing the stage it runs inside)."""
        self._charge()
        self._stack.append(name)
        self.spans[name] += 1
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    def _charge(self) -> None:
        cpu, wall = self._clocks[0](), self._clocks[1]()
        if self._stack:
            self.cpu_s[self._stack[-1]] += cpu - self._cpu
            self.wall_s[self._stack[-1]] += wall - self._wall
        self._cpu, self._wall = cpu, wall

    def snapshot(self) -> dict[str, dict[str, float]]:
        """``{stage: {cpu_s, wall_s, spans}}`` so far."""
        return {s: {"cpu_s": self.cpu_s[s], "wall_s": self.wall_s[s], "spans": self.spans[s]} for s in self.spans}


def metered_call(clock: StageClock, stage: str, fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` with every call charged to ``stage``."""

    def call(*args: Any, **kwargs: Any) -> T:
        with clock.stage(stage):
            return fn(*args, **kwargs)

    return call


def metered_coroutine(clock: StageClock, stage: str, coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
    """An awaitable running ``coro`` with each of its steps (the code between two awaits) charged to ``stage``."""
    return _Metered(clock, stage, coro)


class _Metered:
    __slots__ = ("_clock", "_stage", "_coro")

    def __init__(self, clock: StageClock, stage: str, coro: Coroutine[Any, Any, Any]) -> None:
        self._clock, self._stage, self._coro = clock, stage, coro

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self._coro.__await__()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            with self._clock.stage(self._stage):
                try:
                    yielded = inner.send(sent) if thrown is None else inner.throw(thrown)
                except StopIteration as stop:
                    return stop.value
            try:
                sent, thrown = (yield yielded), None
            except BaseException as error:  # cancellation goes into the coroutine, as a plain await would
                sent, thrown = None, error


class GcClock:
    """Seconds this process spent in Python's garbage collector while open (``gc.callbacks``),
    per generation: a full collection walks every live object, so a driver holding more
    records pays more for each."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def process_figures(pid: int) -> dict[str, float]:
    """``{cpu_s, rss_mb, fds}`` of process ``pid``: user + system CPU seconds since it started,
    resident memory, open file descriptors (-1 when ``/proc/PID/fd`` cannot be read)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = -1
    return {"cpu_s": (int(fields[11]) + int(fields[12])) / _TICK, "rss_mb": memory_mb(pid)["rss_mb"], "fds": fds}
