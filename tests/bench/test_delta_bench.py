"""`vlrl bench delta --json` end to end: the issue's targets for delta shipping."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_delta_shipping_meets_the_byte_targets():
    done = subprocess.run(
        [sys.executable, "-m", "vlrl.cli", "bench", "delta", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["delta_over_bound"] <= 1.05
    assert result["full_over_delta_T15"] >= 8
    assert result["full_over_delta_T50"] >= 25
    for figures in result["per_turns"].values():
        assert figures["bytes_delta"] <= figures["bytes_window5"] <= figures["bytes_full"]
    # The engine received exactly what the client shipped, and far less under delta.
    assert result["rollout"]["delta"]["image_bytes"] * 8 <= result["rollout"]["full"]["image_bytes"]
