"""`vlrl bench driver --json`: the metadata-only driver holds under 1% of a gathering driver."""

from __future__ import annotations

import pytest

from tests.bench.run_bench import run_bench


@pytest.mark.slow
def test_driver_memory_is_metadata_only():
    result = run_bench("driver")
    assert result["driver_mem_ratio"] <= 0.01
    assert result["max_batch_in_64gib"]["vlrl"] > 100 * result["max_batch_in_64gib"]["gathering"]
    # Holding 512 sequences of metadata (and running the hook on each group) stays small.
    assert result["vlrl"]["bytes_per_sequence"] < 64 * 1024
