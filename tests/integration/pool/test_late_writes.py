"""A tenant the loop host gave up on leaves nothing in the store, even when its thread is still
writing the trajectory after the timeout: the host takes back the tenant's writes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.pool.test_harness_pool import _pool
from tests.unit.rollout.test_trajectory import RULE, _image, _result
from vlrl.mm import delete_sequences
from vlrl.pool import HostConfig, TenantContext
from vlrl.records import SeqMeta
from vlrl.rollout.chat import Segment
from vlrl.rollout.trajectory import Trajectory
from vlrl.store.ray_store import RayStore


@dataclass(frozen=True)
class SlowFinish:
    """Finishes a one-turn trajectory on a host thread after ``delay_s``, as an Agent Loop does."""

    store: Any
    delay_s: float
    tried: str = ""
    """A file touched once the thread has tried to write (whether the write was refused or not)."""

    async def run(self, ctx: TenantContext) -> list[SeqMeta]:
        trajectory = Trajectory(ctx.tenant_id)
        trajectory.set_context(Segment([1, 2, 3], [1]), [_image(int(self.delay_s * 10))])
        trajectory.add_generated(_result([9, 9]))

        def finish() -> list[SeqMeta]:
            time.sleep(self.delay_s)
            try:
                return trajectory.finish(
                    self.store, key=f"seq/{ctx.tenant_id}", group_id="g", source="s", sample_index=0, reward=1.0,
                    success=True, finish="done", patch_rule=RULE, ledger=ctx.writes,
                )
            finally:
                if self.tried:
                    Path(self.tried).touch()

        return await ctx.to_thread(finish)


def test_a_timed_out_tenant_whose_thread_writes_late_leaves_no_key(ray_session, tmp_path):
    store = RayStore.Config().build()
    # The fast tenant finishes far inside the 5 s bound even on a loaded machine; the slow one
    # sleeps past it, then tries to write.
    pool = _pool(loop=HostConfig(max_tenants=8, tenant_timeout_s=5.0))
    tried = tmp_path / "slow-thread-tried"
    try:
        jobs = [(SlowFinish(store, 6.0, tried=str(tried)), {}), (SlowFinish(store, 0.0), {})]
        slow, fast = asyncio.run(pool.run_many(jobs))
        assert (slow.status, fast.status) == ("timeout", "ok")
        deadline = time.monotonic() + 120
        while not tried.exists():  # the slow thread's late write has happened (or been refused)
            assert time.monotonic() < deadline, "the slow tenant's thread never tried to write"
            time.sleep(0.05)
        assert store.stats().keys == 3  # the finished tenant's sequence, image and the image's tile pack only
        delete_sequences(store, fast.value)
        assert store.stats().keys == 0
    finally:
        pool.shutdown()
        store.destroy()
