"""The inference client against the real embedded engine: evictions and a replica restart in the
middle of a trajectory are survived by resending, never by failing the rollout; screens shipped as
tiles give the replies whole pixels give; a trajectory across a weight update records each
turn's version and logprobs."""

from __future__ import annotations

import asyncio

import numpy as np

from tests.helpers.chat import gui_screens
from tests.helpers.reference_logprobs import reference_logprobs
from vlrl.mm import patch_rule_of
from vlrl.models import build_tiny
from vlrl.rollout.chat import ChatFormat, ChatTurn
from vlrl.rollout.client import ContextImage, InferenceClient
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.protocol import SamplingParams
from vlrl.rollout.ray_endpoint import RayEndpoint
from vlrl.rollout.trajectory import Trajectory
from vlrl.store import LocalStore


def _screens(n: int) -> list[ContextImage]:
    rng = np.random.default_rng(1)
    return [ContextImage.of(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)) for _ in range(n)]


async def _turns(client, chat, screens, first, last, turns: list[ChatTurn], trajectory="traj", replies=None):
    sampling = SamplingParams(temperature=0.0, max_tokens=3, stop_token_ids=chat.stop_token_ids)
    for turn in range(first, last):
        turns.append(ChatTurn("Click OK." if turn == 0 else "", (320, 240)))
        ids = np.asarray(chat.context(turns).ids, np.int32)
        result = await client.generate(trajectory, ids, screens[: turn + 1], sampling, request_id=f"{trajectory}{turn}")
        turns[-1].answer = [int(t) for t in result.token_ids]
        turns[-1].answer_stopped = result.finish_reason == "stop"
        if replies is not None:
            replies.append((turns[-1].answer, result.logprobs.tolist()))


def _chat(processor) -> ChatFormat:
    return ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")


def test_a_small_engine_image_cache_makes_the_client_resend(ray_session, tiny_path, processor):
    engine = EmbeddedEngine.Config(cpus=0, image_cache_mb=1.5).build(model_path=str(tiny_path))
    try:
        client = InferenceClient([RayEndpoint(engine, "engine")], InferenceClient.Config(backoff_s=0))
        screens = _screens(4)
        asyncio.run(_turns(client, _chat(processor), screens, 0, 4, []))
        stats = ray_session.get(engine.stats.remote())
        assert client.stats.cache_misses > 0 and stats["image_cache_evictions"] > 0
        assert stats["image_bytes_received"] == client.stats.image_bytes_sent > sum(s.pixels.nbytes for s in screens)
    finally:
        ray_session.kill(engine)


def test_a_replica_restart_mid_trajectory_is_survived(ray_session, tiny_path, processor):
    engine = EmbeddedEngine.Config(cpus=0, max_restarts=1).build(model_path=str(tiny_path))
    try:
        config = InferenceClient.Config(backoff_s=0.5, retries=6, image_tile_px=None)
        client = InferenceClient([RayEndpoint(engine, "engine")], config)
        chat, screens, turns = _chat(processor), _screens(4), []
        asyncio.run(_turns(client, chat, screens, 0, 2, turns))
        ray_session.kill(engine, no_restart=False)  # the replica crashes and comes back empty
        asyncio.run(_turns(client, chat, screens, 2, 4, turns))
        stats = ray_session.get(engine.stats.remote())
        # The new process saw the older screens again (resent after its misses) and the new ones.
        assert stats["image_bytes_received"] == sum(s.pixels.nbytes for s in screens)
        assert client.stats.retries + client.stats.cache_misses > 0
    finally:
        ray_session.kill(engine)


def test_screens_shipped_as_tiles_give_the_replies_of_whole_pixels_across_misses(ray_session, tiny_path, processor):
    # A tile cache of a third of a screen: assembling against the last screen misses at times.
    engine = EmbeddedEngine.Config(cpus=0, max_restarts=1, tile_cache_mb=0.07).build(model_path=str(tiny_path))
    try:
        endpoint, chat, screens = RayEndpoint(engine, "engine"), _chat(processor), gui_screens(6)
        whole = InferenceClient([endpoint], InferenceClient.Config(backoff_s=0.5, retries=6, image_tile_px=None))
        tiled = InferenceClient([endpoint], InferenceClient.Config(backoff_s=0.5, retries=6))
        turns_whole, turns_tiled, by_whole, by_tiles = [], [], [], []
        asyncio.run(_turns(tiled, chat, screens, 0, 3, turns_tiled, "tiled", by_tiles))
        asyncio.run(_turns(whole, chat, screens, 0, 3, turns_whole, "whole", by_whole))
        assert tiled.stats.cache_misses > 0
        # Even with the resends, the tiles cost a fraction of the pixels.
        assert tiled.stats.image_bytes_sent < whole.stats.image_bytes_sent / 4
        ray_session.kill(engine, no_restart=False)  # it comes back without the tiles it held
        asyncio.run(_turns(tiled, chat, screens, 3, 6, turns_tiled, "tiled", by_tiles))
        asyncio.run(_turns(whole, chat, screens, 3, 6, turns_whole, "whole", by_whole))
        assert tiled.stats.retries > 0
        assert by_tiles == by_whole and len(by_tiles) == 6
    finally:
        ray_session.kill(engine)


def test_a_trajectory_across_a_weight_update_records_each_turns_version(ray_session, tiny_path, processor, tmp_path):
    """Turn 1 on the starting weights, then a push of other weights, then turns 2 and 3 of the
    same trajectory: the sequence names both versions per turn, and each turn's stored logprobs
    are those of the weights that sampled it."""
    from transformers import Qwen2VLForConditionalGeneration

    engine = EmbeddedEngine.Config(cpus=0).build(model_path=str(tiny_path))
    newer = build_tiny("qwen2_vl", tmp_path / "newer", seed=7)
    chat, screens, turns, trajectory = _chat(processor), gui_screens(3), [], Trajectory("traj")
    client = InferenceClient([RayEndpoint(engine, "engine")])
    sampling = SamplingParams(temperature=1.0, max_tokens=4, stop_token_ids=chat.stop_token_ids, seed=0)

    async def turn(index: int) -> None:
        turns.append(ChatTurn("Click OK." if index == 0 else "", (320, 240)))
        context = chat.context(turns)
        trajectory.set_context(context, screens[: index + 1])
        result = await client.generate("traj", trajectory.current.prompt_array(), screens[: index + 1], sampling, request_id=f"r{index}")
        trajectory.add_generated(result)
        turns[-1].answer, turns[-1].answer_stopped = [int(t) for t in result.token_ids], result.finish_reason == "stop"

    try:
        asyncio.run(turn(0))
        ray_session.get(engine.update_weights.remote(Qwen2VLForConditionalGeneration.from_pretrained(newer).state_dict(), 1))
        asyncio.run(turn(1))
        asyncio.run(turn(2))
    finally:
        ray_session.kill(engine)
    store = LocalStore()
    (meta,) = trajectory.finish(
        store, key="seq/traj", group_id="g", source="s", sample_index=0, reward=0.0, success=False,
        finish="max_turns", patch_rule=patch_rule_of(processor),
    )  # fmt: skip
    assert meta.turn_versions == (0, 1, 1) and meta.policy_version == 0 and meta.newest_version == 1
    assert meta.stale_tokens(1) == meta.turn_tokens[0] > 0
    payload = store.get([meta.key])[meta.key]
    first = np.zeros(meta.num_tokens - 1, bool)  # logprob positions t - 1 of the first turn's tokens
    first[meta.context_lengths[0] - 1 : meta.context_lengths[0] - 1 + meta.turn_tokens[0]] = True
    later = payload["loss_mask"][1:] & ~first
    stored = payload["logprobs"][1:]
    old, new = (Qwen2VLForConditionalGeneration.from_pretrained(p).eval() for p in (tiny_path, newer))
    old_lp, new_lp = reference_logprobs(old, processor, store, meta), reference_logprobs(new, processor, store, meta)
    np.testing.assert_allclose(old_lp[first], stored[first], atol=2e-4)
    np.testing.assert_allclose(new_lp[later], stored[later], atol=2e-4)
    assert np.abs(new_lp[first] - stored[first]).max() > 1e-2  # the two weights really differ here
