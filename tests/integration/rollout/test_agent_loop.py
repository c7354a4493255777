"""Agent Loops end to end on real parts: loop hosts of the Harness Pool, the desktop harness on
env hosts, the embedded engine serving a tiny Qwen2-VL, and the Ray payload store."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import numpy as np
import pytest
import ray as ray_module
from transformers import Qwen2VLForConditionalGeneration

from tests.helpers.reference_logprobs import reference_logprobs
from vlrl.config import AgentBehaviour, DataSource, EnvSettings
from vlrl.pool import HarnessPool, HostBudget, HostConfig, TenantContext
from vlrl.rollout.agent_loop import AgentLoop
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.loop_setup import LoopSetup
from vlrl.store.ray_store import RayStore

SOURCE = DataSource(
    name="click",
    codebase="desktop",
    agent=AgentBehaviour(max_turns=3, max_tokens=12, temperature=1.0),
    env=EnvSettings(tasks=["click-target"]),
)


@pytest.fixture(scope="module")
def engine(ray_session, tiny_path):
    handle = EmbeddedEngine.Config(cpus=0, max_batch=8).build(model_path=str(tiny_path))
    yield handle
    ray_session.kill(handle)


@pytest.fixture()
def store(ray_session):
    built = RayStore.Config(namespace=uuid.uuid4().hex[:8]).build()
    yield built
    built.destroy()


def _pool(setup: LoopSetup, loop_hosts: int = 1, max_tenants: int = 64) -> HarnessPool:
    return HarnessPool.Config(
        budget=HostBudget(total_hosts=loop_hosts + 1, shares={"loop": loop_hosts, "desktop": 1}),
        loop_host=HostConfig(max_tenants=max_tenants),
        env_host=HostConfig(max_tenants=max_tenants),
    ).build(loop_setup=setup)


def test_trajectories_land_in_the_store_as_the_policy_sampled_them(ray_session, engine, store, tiny_path, processor):
    pool = _pool(LoopSetup(model_path=str(tiny_path), engines=(engine,), store=store))
    try:
        jobs = [
            (AgentLoop(SOURCE, seed=100 + i // 2, group_id=f"g{i // 2}", sample_index=i % 2), {"codebase": "desktop"})
            for i in range(6)
        ]
        outcomes = asyncio.run(pool.run_many(jobs))
    finally:
        pool.shutdown()
    assert [o.status for o in outcomes] == ["ok"] * 6, [o.error for o in outcomes]
    assert all(len(o.value) == 1 for o in outcomes)  # every screenshot kept: one sequence each
    metas = [o.value[0] for o in outcomes]
    stats = ray_module.get(engine.stats.remote())

    # Every image crossed to the engine once per trajectory, as the tiles the engine lacked: far
    # fewer bytes than the images' pixels, and never a miss (the logprobs below prove the pixels).
    pixel_bytes = sum(m.nbytes for meta in metas for m in meta.images)
    assert 0 < stats["image_bytes_received"] < pixel_bytes / 10
    assert stats["image_cache_misses"] == 0

    # The stored ids and logprobs are the policy's own: a plain forward reproduces the logprobs.
    model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_path).eval()
    for meta in metas[:3]:
        payload = store.get([meta.key])[meta.key]
        assert payload["token_ids"].shape == (meta.num_tokens,) and payload["loss_mask"].sum() == meta.num_response_tokens
        logprobs = reference_logprobs(model, processor, store, meta)
        mask = payload["loss_mask"][1:]
        np.testing.assert_allclose(logprobs[mask], payload["logprobs"][1:][mask], atol=2e-4)
        assert meta.turns >= 1 and meta.context_lengths[0] < meta.num_tokens
    for meta in metas:  # each turn's state: the screenshot shown last before its request
        shown = [max((o for o in meta.image_offsets if o[0] < start), default=None) for start in meta.context_lengths]
        assert meta.turn_states == tuple(meta.images[index].content_hash for _, index in shown)
        assert len(meta.turn_rewards) == meta.turns and sum(meta.turn_rewards) == pytest.approx(meta.reward)


@dataclass(frozen=True)
class WhoServesMe:
    """Reports the identity of the host's shared client and tokenizer."""

    async def run(self, ctx: TenantContext) -> tuple[int, int, int]:
        runtime = ctx.shared["runtime"]
        await asyncio.sleep(0.5)  # stay in flight together
        import os

        return os.getpid(), id(runtime.client), id(runtime.tokenizer)


def test_64_concurrent_loops_on_one_host_share_one_client_and_one_tokenizer(ray_session, engine, store, tiny_path):
    pool = _pool(LoopSetup(model_path=str(tiny_path), engines=(engine,), store=store))
    try:
        outcomes = asyncio.run(pool.run_many([(WhoServesMe(), {}) for _ in range(64)]))
    finally:
        pool.shutdown()
    assert len({o.value for o in outcomes}) == 1


def test_a_history_window_keeps_the_last_screenshots_and_splits_sequences(ray_session, engine, store, tiny_path):
    source = DataSource(
        name="window",
        codebase="desktop",
        agent=AgentBehaviour(max_turns=4, max_tokens=6, history_images=2, format_penalty=0.25),
        env=EnvSettings(tasks=["scroll-find"], max_steps=10),
    )
    pool = _pool(LoopSetup(model_path=str(tiny_path), engines=(engine,), store=store))
    try:
        (outcome,) = asyncio.run(pool.run_many([(AgentLoop(source, seed=7, group_id="w", sample_index=0), {"codebase": "desktop"})]))
    finally:
        pool.shutdown()
    assert outcome.status == "ok", outcome.error
    metas = outcome.value
    turns = sum(m.turns for m in metas)
    # Turns 1-2 share one sequence; every later turn drops a screenshot and starts a new one.
    assert len(metas) == max(1, turns - 1)
    assert [len(m.image_offsets) for m in metas] == [min(turns, 2)] + [2] * (len(metas) - 1)
    for meta in metas:
        payload = store.get([meta.key])[meta.key]
        assert payload["loss_mask"].sum() == meta.num_response_tokens
    assert all(m.reward == metas[0].reward for m in metas)
