"""Rendering cost per family: docs/harnesses.md promises about 1 ms a step at 320x240.

Measured in this thread's CPU time, which other jobs on shared cores do not inflate the way they
inflate wall time; the bound has 10x slack over the slowest family measured (about 2 ms), so it
catches a rendering regression (a per-pixel Python loop, a full-size redraw), not noise.
"""

from __future__ import annotations

import time

from harnesses.desktop import DesktopHarness
from vlrl.harness import Action

BOUND_MS = 20.0
"""CPU milliseconds a reset or a step of any family may take on average."""


def test_reset_and_step_stay_within_the_documented_cost(capsys):
    harness, rounds, lines, slow = DesktopHarness(), 20, [], []
    for task in harness.tasks:
        reset_s = step_s = 0.0
        for seed in range(rounds):
            start = time.thread_time()
            harness.reset(seed=seed, options={"task": task})
            reset_s += time.thread_time() - start
            start = time.thread_time()
            harness.step(Action.move(5, 5))
            step_s += time.thread_time() - start
        reset_ms, step_ms = 1e3 * reset_s / rounds, 1e3 * step_s / rounds
        lines.append(f"  {task:<18} reset {reset_ms:5.2f} ms  step {step_ms:5.2f} ms (CPU)")
        slow += [f"{task} {what} {ms:.1f} ms" for what, ms in (("reset", reset_ms), ("step", step_ms)) if ms > BOUND_MS]
    with capsys.disabled():
        print("\ndesktop harness at 320x240:", *lines, sep="\n")
    assert not slow, f"over {BOUND_MS} CPU ms on average: {', '.join(slow)}"
