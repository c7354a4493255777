"""Budget shares: pool sizes from shares of a fixed host budget, and invalid shares refused."""

from __future__ import annotations

import pytest

from vlrl.config import ConfigError, validate
from vlrl.pool import HostBudget


@pytest.mark.parametrize(
    ("total", "shares", "sizes"),
    [
        (4, {"loop": 1, "desktop": 1}, {"loop": 2, "desktop": 2}),
        (10, {"loop": 2, "desktop": 1, "browser": 1}, {"loop": 5, "desktop": 3, "browser": 2}),
        (3, {"loop": 100, "desktop": 1, "browser": 1}, {"loop": 1, "desktop": 1, "browser": 1}),
        (7, {"loop": 1, "desktop": 1, "miniwob": 1}, {"loop": 3, "desktop": 2, "miniwob": 2}),
        (2, {"loop": 1}, {"loop": 2}),  # external agents only: no env pool
        (16, {"loop": 0.5, "desktop": 0.25, "browser": 0.25}, {"loop": 8, "desktop": 4, "browser": 4}),
    ],
)
def test_sizes_follow_shares_and_every_pool_gets_a_host(total, shares, sizes):
    budget = HostBudget(total_hosts=total, shares=shares)
    assert budget.sizes() == sizes
    assert sum(budget.sizes().values()) == total


@pytest.mark.parametrize(
    ("total", "shares", "message"),
    [
        (4, {"loop": 1, "desktop": -1}, r"config field 'shares\['desktop'\]': got -1 .*expected a share > 0"),
        (4, {"loop": 1, "desktop": 0}, r"shares\['desktop'\]': got 0"),
        (4, {"desktop": 1, "browser": 1}, "expected an entry for the 'loop' pool"),
        (2, {"loop": 1, "desktop": 1, "browser": 1}, r"'total_hosts': got 2 .*at least one host per pool \(3 pools\)"),
        (0, {"loop": 1, "desktop": 1}, r"'total_hosts': got 0 .*>= 1"),
    ],
)
def test_invalid_budgets_fail_at_validation_naming_the_field(total, shares, message):
    with pytest.raises(ConfigError, match=message):
        validate(HostBudget(total_hosts=total, shares=shares))
