"""The compact progress display of a training job: one status line, refreshed while it runs.

    [rl 12/40 3m05s] episodes in flight 16 | groups 52 acc, 11 rej, 3 drop, 0 fail | train 11.2k tok/s | store 4.1 MB (130 keys) | pass 0.47 | eval 0.62

What it shows comes from two places: figures the job sets when it knows them (phase, step,
training throughput, pass rate, evaluation) and a probe it polls for live ones (episodes in
flight in the Harness Pool, the driver's group books, the store's bytes). On a terminal the line
is rewritten in place; otherwise (a log file, CI) a line is printed every ``interval_s`` and at
every step.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TextIO

from vlrl.config import Gt


class Progress:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """The status line printed while the job runs."""

        enabled: bool = True
        """Print the status line at all (the final JSON summary is printed regardless)."""

        interval_s: Annotated[float, Gt(0)] = 15.0
        """Seconds between refreshes while waiting on rollouts or a training step (not on a
        terminal: between printed lines)."""

    def __init__(self, config: Progress.Config, *, total_steps: int, stream: TextIO | None = None) -> None:
        self.config = config
        self.total_steps = total_steps
        self.stream = stream or sys.stderr
        self.fields: dict[str, Any] = {"phase": "setup", "step": 0}
        self.probe: Callable[[], dict[str, Any]] = dict
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._start = time.perf_counter()
        self._task: asyncio.Task[None] | None = None

    def set(self, **fields: Any) -> None:
        self.fields.update(fields)

    def show(self, *, final: bool = False) -> None:
        """Print the line now (a step ended, a phase changed)."""
        if not self.config.enabled:
            return
        line = self.line()
        if self._tty:
            self.stream.write("\r\033[K" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def line(self) -> str:
        f = {**self.fields, **_safe(self.probe)}
        elapsed = _duration(time.perf_counter() - self._start)
        head = f"[{f['phase']} {f['step']}/{self.total_steps} {elapsed}]" if f["phase"] == "rl" else f"[{f['phase']} {elapsed}]"
        parts = [head]
        if "in_flight" in f:
            parts.append(f"episodes in flight {f['in_flight']}")
        if "accepted" in f:
            parts.append(
                f"groups {f['accepted']} acc, {f.get('rejected', 0)} rej, {f.get('dropped', 0)} drop, {f.get('failed', 0)} fail"
            )
        if "sft_step" in f and f["phase"] == "warm-start":
            parts.append(f"sft step {f['sft_step']}/{f.get('sft_steps', '?')} loss {f.get('sft_loss', float('nan')):.3f}")
        if "tokens_per_s" in f:
            parts.append(f"train {_si(f['tokens_per_s'])} tok/s")
        if "store_bytes" in f:
            parts.append(f"store {_bytes(f['store_bytes'])} ({f.get('store_keys', 0)} keys)")
        if "pass_rate" in f:
            parts.append(f"pass {f['pass_rate']:.2f}")
        if "eval" in f:
            parts.append(f"eval {f['eval']:.2f}")
        return " | ".join(parts)

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
        if self._tty and self.config.enabled:
            self.stream.write("\n")

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.config.interval_s)
            self.show()


def _safe(probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return probe()
    except Exception:  # a figure that cannot be read now (an actor restarting) is left out
        return {}


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def _si(value: float) -> str:
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
