"""Rendering speed, reported rather than asserted (machines differ): reset and step per family."""

from __future__ import annotations

import time

from harnesses.desktop import DesktopHarness
from vlrl.harness import Action


def test_report_reset_and_step_times(capsys):
    harness, rounds, lines = DesktopHarness(), 20, []
    for task in harness.tasks:
        reset_s = step_s = 0.0
        for seed in range(rounds):
            start = time.perf_counter()
            harness.reset(seed=seed, options={"task": task})
            reset_s += time.perf_counter() - start
            start = time.perf_counter()
            harness.step(Action.move(5, 5))
            step_s += time.perf_counter() - start
        lines.append(f"  {task:<18} reset {1e3 * reset_s / rounds:5.2f} ms  step {1e3 * step_s / rounds:5.2f} ms")
    with capsys.disabled():
        print("\ndesktop harness at 320x240:", *lines, sep="\n")
