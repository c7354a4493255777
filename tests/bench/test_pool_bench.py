"""`vlrl bench pool --json` end to end, in its own process and Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_pool_bench_shows_fixed_actors_flat_gcs_descriptors_and_both_ratios():
    done = subprocess.run(
        [sys.executable, "-m", "vlrl.cli", "bench", "pool", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["actors_pool"] == result["pool_8x"]["actors"] == 4
    assert result["pool"]["processes"] == result["pool_8x"]["processes"] == 4
    assert result["actors_per_rollout"] == result["per_rollout"]["processes"] == result["workload"]["episodes"]
    # The GCS holds a descriptor per worker: flat for the pool at 8x the episodes, growing per rollout.
    assert result["gcs_fds_pool_8x"] <= result["gcs_fds_pool"] + 4
    assert result["gcs_fds_per_rollout"] > result["gcs_fds_pool"]
    assert result["throughput_ratio"] >= 1
    assert result["thread_offload_ratio"] > 1
