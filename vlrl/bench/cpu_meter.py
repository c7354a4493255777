"""Machine-wide busy CPU time, sampled from ``/proc/stat``: what every process of a run computed.

A run whose processes (engine, trainer, hosts, driver) keep the cores busy a fraction ``u`` of its
wall time leaves ``1 - u`` idle. Overlapping that run's work can at best fill the idle time, so
``1 / u`` bounds what overlap can gain on the same machine (``vlrl bench async``'s
``speedup_bound``).
"""

from __future__ import annotations

import bisect
import os
import time

from vlrl.bench.sampler import Sampler


class CpuMeter(Sampler):
    """Samples busy CPU seconds (all cores) every ``period_s`` while open (a ``with`` block)."""

    def __init__(self, period_s: float = 0.2) -> None:
        super().__init__(period_s)
        self.times: list[float] = []
        self.busy: list[float] = []

    def busy_between(self, start: float, end: float) -> float:
        """Busy CPU seconds between two ``time.time()`` instants (interpolated between samples)."""
        return self._at(end) - self._at(start)

    @staticmethod
    def cores() -> int:
        return len(os.sched_getaffinity(0))

    def _sample(self) -> None:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal (guest time is inside user already)
        busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + (fields[7] if len(fields) > 7 else 0)
        self.times.append(time.time())
        self.busy.append(busy / os.sysconf("SC_CLK_TCK"))

    def _at(self, instant: float) -> float:
        i = bisect.bisect_left(self.times, instant)
        if i == 0:
            return self.busy[0]
        if i == len(self.times):
            return self.busy[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        b0, b1 = self.busy[i - 1], self.busy[i]
        return b0 + (b1 - b0) * (instant - t0) / (t1 - t0)
