"""``RolloutMeter`` counts every finished episode per source between two ``take`` calls."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from tests.helpers.records import seq_meta
from vlrl.job.meters import RolloutMeter
from vlrl.pool.tenant import TenantOutcome


class _Pool:
    """Stands in for the Harness Pool: answers each tenant with its scripted outcome."""

    book = None

    async def run(self, tenant, **_):
        return tenant.outcome


def _episode(source: str, success: bool, sequences: int = 1) -> SimpleNamespace:
    """An episode whose context was rewritten ``sequences - 1`` times (one sequence each)."""
    metas = [
        seq_meta(f"{source}/{success}/{i}", 10, source=source, success=success, reward=float(success), num_response_tokens=4)
        for i in range(sequences)
    ]
    return SimpleNamespace(source=SimpleNamespace(name=source), outcome=TenantOutcome("t", "ok", metas))


def test_every_source_reports_each_window_even_without_episodes():
    meter = RolloutMeter(_Pool(), ["desktop", "web"])
    tenants = [_episode("desktop", True), _episode("desktop", False), _episode("web", True, sequences=2)]
    failed = SimpleNamespace(source=SimpleNamespace(name="web"), outcome=TenantOutcome("t", "failed", error="boom"))

    async def play():
        return await asyncio.gather(*(meter.run(t) for t in [*tenants, failed]))

    asyncio.run(play())
    first = meter.take()
    assert first["rollout/desktop/episodes"] == 2 and first["rollout/desktop/pass_rate"] == 0.5
    assert first["rollout/web/episodes"] == 1 and first["rollout/failed"] == 1
    assert first["rollout/desktop/turns"] == first["rollout/desktop/response_tokens"] / 4 == 1
    assert first["rollout/desktop/reward"] == 0.5
    assert first["rollout/desktop/sequences"] == 1 and first["rollout/web/sequences"] == 2  # one history rewrite
    assert first["rollout/sequences"] == 4 / 3
    assert first["rollout/episodes"] == 3 and first["rollout/pass_rate"] == 2 / 3
    second = meter.take()  # nothing finished since: zeros, not missing keys
    assert second["rollout/desktop/episodes"] == second["rollout/web/episodes"] == 0
    assert "rollout/pass_rate" not in second
