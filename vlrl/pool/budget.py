"""Splitting a fixed budget of host actors among the loop pool and one env pool per codebase.

Shares are set once at start-up and do not follow the data mixture scheduled each step: a pool's
size is a deployment decision (how much of the machine each codebase may use), the mixture is a
training decision (how much of each batch each source contributes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from vlrl.config import ConfigError, Ge

LOOP_POOL = "loop"
"""Name of the model-side pool in a budget's shares; every other name is a harness codebase."""


@dataclass(kw_only=True, slots=True)
class HostBudget:
    """A fixed number of host actors and each pool's share of them."""

    total_hosts: Annotated[int, Ge(1)] = 4
    """Host actors in all pools together (a loop pool and an env pool per harness codebase)."""

    shares: dict[str, float] = field(default_factory=lambda: {LOOP_POOL: 1.0, "desktop": 1.0})
    """Relative share of each pool: 'loop' for Agent Loops, one entry per harness codebase (none
    when every source is an external agent's, ``DataSource.external``)."""

    def check(self) -> None:
        if LOOP_POOL not in self.shares:
            raise ConfigError("shares", self.shares, f"an entry for the {LOOP_POOL!r} pool")
        for name, share in self.shares.items():
            if not share > 0:
                raise ConfigError(f"shares[{name!r}]", share, "a share > 0")
        if self.total_hosts < len(self.shares):
            raise ConfigError(
                "total_hosts", self.total_hosts, f"at least one host per pool ({len(self.shares)} pools)"
            )

    def sizes(self) -> dict[str, int]:
        """Hosts per pool: proportional to shares, at least one each."""
        self.check()
        return split_by_shares(self.total_hosts, self.shares, minimum=1)


def split_by_shares(total: int, shares: dict[str, float], *, minimum: int = 0) -> dict[str, int]:
    """Split ``total`` integer units by relative ``shares`` (largest remainder), each part at least
    ``minimum``; ties go to the earlier name. Callers ensure ``total >= minimum * len(shares)``."""
    weight = sum(shares.values())
    exact = {name: total * share / weight for name, share in shares.items()}
    parts = {name: max(minimum, int(value)) for name, value in exact.items()}
    by_remainder = sorted(exact, key=lambda n: exact[n] - int(exact[n]), reverse=True)
    for name in by_remainder[: max(0, total - sum(parts.values()))]:
        parts[name] += 1
    while sum(parts.values()) > total:  # minimums pushed us over: trim the most over-served
        name = max((n for n in parts if parts[n] > minimum), key=lambda n: parts[n] - exact[n])
        parts[name] -= 1
    return parts
