"""`vlrl bench driver --json`: measured driver memory, metadata-only vs gathering ``pixel_values``.

The gathering driver's bytes are derived here from ``PatchRule`` (which ``tests/unit/mm/
test_patch_grid.py`` holds to the Qwen2-VL processor's ``pixel_values`` shape), not from the
bench's own report.
"""

from __future__ import annotations

import pytest

from tests.helpers.run_bench import run_bench
from vlrl.mm import PatchRule

SCREENSHOTS, WIDTH, HEIGHT, TOKENS = 15, 1280, 720, 4096
MIB = 2**20


def pixel_values_mib_per_sequence() -> float:
    rule = PatchRule()
    t, gh, gw = rule.grid(WIDTH, HEIGHT)
    per_image = t * gh * gw * 3 * rule.temporal_patch_size * rule.patch_size**2 * 4  # float32 patches
    return SCREENSHOTS * per_image / MIB


@pytest.fixture(scope="module")
def result(ray_session) -> dict:
    return run_bench("driver", size="smoke")


def test_gathering_driver_holds_its_pixel_values(result: dict) -> None:
    sizes = result["batch_sizes"]
    gather = result["driver_rss_mb_gather"]
    assert sorted(gather) == sorted(result["driver_rss_mb_metadata"]) == sorted(str(b) for b in sizes)
    pixels = pixel_values_mib_per_sequence()
    for small, large in zip(sizes, sizes[1:]):
        # RSS grows by at least the float32 patches of the added sequences (2% for page noise):
        # fails if the baseline held nothing, raw uint8 screenshots, or fewer images.
        assert gather[str(large)] - gather[str(small)] >= 0.98 * (large - small) * pixels, (small, large, gather)
    assert result["driver_pss_mb_gather"][str(sizes[-1])] >= 0.98 * sizes[-1] * pixels


def test_metadata_driver_holds_a_small_fraction(result: dict) -> None:
    largest = str(result["batch_sizes"][-1])
    metadata, gather = result["driver_rss_mb_metadata"][largest], result["driver_rss_mb_gather"][largest]
    assert metadata < 0.01 * gather, (metadata, gather)
    # At a larger batch the driver still holds under 1% of a gathered sequence per sequence (raw
    # screenshots alone would be 13%), while the token payload (ids, logprobs, mask, advantages)
    # lands in the store shards' processes instead.
    alone = result["metadata_only"]
    assert alone["increase"]["rss_mb"] < alone["batch"] * 0.01 * pixel_values_mib_per_sequence(), alone
    token_payload_mib = alone["batch"] * TOKENS * (4 + 4 + 1 + 4) / MIB
    assert alone["increase"]["store_shards_rss_mb"] >= 0.9 * token_payload_mib, alone


def test_the_report_plots_both_drivers_over_the_measured_batch_sizes(result: dict) -> None:
    from vlrl.bench.curves import curves_of

    (curve,) = curves_of("driver", result)
    assert {name: [x for x, _ in points] for name, points in curve.series.items()} == {
        driver: [float(b) for b in result["batch_sizes"]] for driver in ("metadata", "gather")
    }
