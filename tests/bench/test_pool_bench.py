"""`vlrl bench pool --json` end to end, in its own process and Ray."""

from __future__ import annotations

import pytest

from tests.bench.run_bench import run_bench


@pytest.mark.slow
def test_pool_bench_shows_fixed_actors_flat_gcs_descriptors_and_both_ratios():
    result = run_bench("pool")
    assert result["actors_pool"] == result["pool_8x"]["actors"] == 4
    assert result["pool"]["processes"] == result["pool_8x"]["processes"] == 4
    assert result["actors_per_rollout"] == result["per_rollout"]["processes"] == result["workload"]["episodes"]
    # The GCS holds a descriptor per worker: flat for the pool at 8x the episodes, growing per rollout.
    assert result["gcs_fds_pool_8x"] <= result["gcs_fds_pool"] + 4
    assert result["gcs_fds_per_rollout"] > result["gcs_fds_pool"]
    assert result["throughput_ratio"] >= 1
    assert result["thread_offload_ratio"] > 1
