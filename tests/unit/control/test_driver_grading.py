"""Grading is bounded by default (a finite timeout). A hung judge on a real pool and store is
tests/integration/control/test_driver_grading.py."""

from __future__ import annotations

import math

from vlrl.control.grader import GraderRunner


def test_grading_is_bounded_by_default():
    timeout = GraderRunner.Config().timeout_s
    assert timeout is not None and math.isfinite(timeout) and timeout > 0
