"""Agent Loops end to end on real parts: loop hosts of the Harness Pool, the desktop harness on
env hosts, the embedded engine serving a tiny Qwen2-VL, and the Ray payload store."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, replace

import numpy as np
import pytest
import ray as ray_module
from transformers import Qwen2VLForConditionalGeneration

from tests.helpers.reference_logprobs import reference_logprobs
from vlrl.config import AgentBehaviour, Branching, DataSource, EnvSettings
from vlrl.harness import register
from vlrl.mm import delete_sequences
from vlrl.pool import HarnessPool, HostBudget, HostConfig, TenantContext
from vlrl.records import TreeRollout
from vlrl.rollout.agent_loop import AgentLoop
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.loop_setup import LoopSetup
from vlrl.store.ray_store import RayStore
from vlrl.store.sequence_rows import read_sequences

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


BRANCHING = DataSource(
    name="menu",
    codebase="desktop",
    agent=AgentBehaviour(max_turns=3, max_tokens=12, temperature=1.0, format_penalty=0.25),
    env=EnvSettings(width=160, height=120, tasks=["select-menu"], max_steps=3, params={"distractors": 0}),
    group_size=4,
    branching=Branching(points=2, branches=2),
)


def test_a_tree_shares_its_roots_prefix_and_counts_how_its_branches_started(ray_session, engine, store, tiny_path):
    """A branching source's tenant plays a root and branches from its turns on the desktop harness
    (one replay and one fork per point); each branch's prompt is the root's context at its branch
    turn, token for token, stored once (the branch keeps the rows after it and a reference to the
    root's key), and only its own replies carry loss."""
    pool = _pool(LoopSetup(model_path=str(tiny_path), engines=(engine,), store=store))
    try:
        jobs = [(AgentLoop(BRANCHING, seed=11 + i, group_id=f"t{i}", sample_index=0), {"codebase": "desktop"}) for i in range(3)]
        outcomes = asyncio.run(pool.run_many(jobs))
    finally:
        pool.shutdown()
    assert [o.status for o in outcomes] == ["ok"] * 3, [o.error for o in outcomes]
    trees = [o.value for o in outcomes]
    assert all(isinstance(t, TreeRollout) and not t.failures for t in trees)
    branched = [(t, m) for t in trees for m in t.metas if m.branch_of]
    assert branched, "no root lasted two turns"
    assert sum(t.replays for t in trees) >= 1 and sum(t.forks for t in trees) >= 1
    for tree, meta in branched:
        root = next(m for m in tree.metas if m.sample_index == meta.branch_of[0])
        turn = meta.branch_of[1]
        assert 1 <= turn < root.turns and meta.turns <= BRANCHING.agent.max_turns - turn
        assert meta.turn_states[0] == root.turn_states[turn]  # the branch starts on the root's screen there
        prefix = root.context_lengths[turn]
        assert (meta.prefix_key, meta.prefix_tokens) == (root.key, prefix)  # stored once, under the root's key
        assert store.holds([(root.key, meta.key)]) == [True] and root.prefix_shared
        assert len(store.get([meta.key], ["token_ids"])[meta.key]["token_ids"]) == meta.num_tokens - prefix
        rows = read_sequences(store, [root, meta], ["token_ids", "loss_mask"])
        np.testing.assert_array_equal(rows[meta.key]["token_ids"][:prefix], rows[root.key]["token_ids"][:prefix])
        assert meta.context_lengths[0] == prefix and not rows[meta.key]["loss_mask"][:prefix].any()
        assert rows[meta.key]["loss_mask"].sum() == meta.num_response_tokens
    delete_sequences(store, [m for t in trees for m in t.metas])
    assert store.stats().keys == 0


def test_a_replay_that_diverges_fails_its_branches_not_the_tree(ray_session, engine, store, tiny_path):
    register("desktop-drift", "tests.helpers.drifting_harness:DriftingDesktop", override=True)
    source = replace(BRANCHING, name="drift", codebase="desktop-drift", branching=Branching(points=1, branches=2))
    pool = HarnessPool.Config(
        budget=HostBudget(total_hosts=2, shares={"loop": 1, "desktop-drift": 1}),
        loop_host=HostConfig(max_tenants=8),
        env_host=HostConfig(max_tenants=8),
    ).build(loop_setup=LoopSetup(model_path=str(tiny_path), engines=(engine,), store=store))
    try:
        jobs = [(AgentLoop(source, seed=21 + i, group_id=f"d{i}", sample_index=0), {"codebase": "desktop-drift"}) for i in range(3)]
        outcomes = asyncio.run(pool.run_many(jobs))
    finally:
        pool.shutdown()
    assert [o.status for o in outcomes] == ["ok"] * 3, [o.error for o in outcomes]
    trees = [o.value for o in outcomes]
    failures = [f for t in trees for f in t.failures]
    assert failures and all("replay to turn" in f and "replay diverged at turn 0" in f for f in failures), failures
    assert all(not m.branch_of for t in trees for m in t.metas)  # nothing of a diverged branch was kept
    assert all(t.replays == 0 and t.forks == 0 for t in trees)
    delete_sequences(store, [m for t in trees for m in t.metas])
    assert store.stats().keys == 0
