"""``CpuMeter``: a busy thread's CPU seconds show up, and never more than the cores could give
(what else runs on the machine meanwhile counts too, so only these bounds are certain)."""

from __future__ import annotations

import time

from vlrl.bench.cpu_meter import CpuMeter


def test_a_spinning_thread_is_counted_within_what_the_cores_can_give():
    with CpuMeter(period_s=0.05) as cpu:
        start = time.time()
        while time.time() - start < 0.6:  # one core busy
            pass
        end = time.time()
    assert 0.45 <= cpu.busy_between(start, end) <= CpuMeter.cores() * (end - start) + 0.05
