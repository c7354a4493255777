"""`vlrl bench delta --json` end to end: the issue's targets for delta shipping."""

from __future__ import annotations

import pytest

from tests.bench.run_bench import run_bench


@pytest.mark.slow
def test_delta_shipping_meets_the_byte_targets():
    result = run_bench("delta")
    assert result["delta_over_bound"] <= 1.05
    assert result["full_over_delta_T15"] >= 8
    assert result["full_over_delta_T50"] >= 25
    for figures in result["per_turns"].values():
        assert figures["bytes_delta"] <= figures["bytes_window5"] <= figures["bytes_full"]
    # The engine received exactly what the client shipped, and far less under delta.
    assert result["rollout"]["delta"]["image_bytes"] * 8 <= result["rollout"]["full"]["image_bytes"]
