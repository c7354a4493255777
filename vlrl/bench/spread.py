"""How every repeated benchmark timing is reported: min / median / max over its runs."""

from __future__ import annotations

import statistics


def spread(values: list[float]) -> dict[str, float]:
    """``{min, median, max, runs}`` of ``values`` (all 0 when there are none)."""
    if not values:
        return {"min": 0.0, "median": 0.0, "max": 0.0, "runs": 0}
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "runs": len(values)}
