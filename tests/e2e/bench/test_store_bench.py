"""`vlrl bench store --json` end to end, in this process on the session's Ray, with its own
TransferQueue. That ``vlrl bench --list`` names it is tests/integration/bench/test_store_bench.py."""

from __future__ import annotations

from tests.helpers.run_bench import run_bench


def test_store_bench_prints_every_backend_and_the_ratios_as_last_json_line(ray_session):
    result = run_bench("store", size="smoke")
    assert set(result["backends"]) == {"local", "ray", "transferqueue"}
    for name, figures in result["backends"].items():
        # One 4k-token float32 field out of a ~41 MB row; a quarter of it, chunk-rounded.
        assert figures["projection_ratio"] < 0.001, name
        assert figures["range_ratio"] <= figures["projection_ratio"] / 2, name
        assert figures["range_over_field"] <= 0.5, name
