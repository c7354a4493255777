"""Which env pool runs each data source: checked when the pool is configured, before any actor."""

from __future__ import annotations

from vlrl.config import ConfigError, DataSource
from vlrl.harness import registered


def check_sources_have_pools(sources: list[DataSource], shares: dict[str, float]) -> None:
    """Every source's codebase must be a registered harness codebase with a share of the host
    budget (its env pool); an external agent's source needs none (it owns its environment)."""
    known = registered()
    for i, source in enumerate(sources):
        if source.env_pool is None:
            continue
        if source.codebase not in known:
            raise ConfigError(
                f"sources[{i}].codebase", source.codebase, f"a registered harness codebase, one of {known}"
            )
        if source.codebase not in shares:
            raise ConfigError(
                f"sources[{i}].codebase",
                source.codebase,
                f"a codebase with an env pool in pool.budget.shares {sorted(shares)}",
            )
