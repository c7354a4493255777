"""``VLLMEngine`` on vLLM's real engine, for every model family: a multi-turn, multi-image
trajectory sampled through the inference client, a weight push in its middle, and what the
trainer would read back from the store.

Per family: the stored logprobs of every sampled token equal a float32 forward of the stored
sequence under the weights that sampled it (before and after the push), and vLLM's prompt
logprobs (``score``) equal the forward at every position; the push really changes what is
served and names the pushed version; an image reference the replica does not hold is answered
by one ``CacheMiss`` naming it, and the client's one resend then gets the answer. A LoRA run's
pushes reach the replica as vLLM's LoRA adapter (every family here says vLLM's LoRA serves it,
``ModelFamily.vllm_lora``), and vLLM then serves the adapters' logprobs.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import torch

from tests.helpers.chat import gui_screens
from tests.helpers.reference_logprobs import reference_logprobs, sequence_logits, sequence_logprobs, stored_images
from tests.vllm.conftest import FAMILIES, VLLM_HEAD_DIM, cpu_engine
from vlrl.mm import content_hash, patch_rule_of
from vlrl.models import build_tiny
from vlrl.models.registry import family as model_family
from vlrl.rollout.chat import ChatFormat, ChatTurn
from vlrl.rollout.client import InferenceClient
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, ImagePart, SamplingParams, ScoreResult
from vlrl.rollout.engine.weights_keeper import weights_keeper
from vlrl.rollout.ray_endpoint import RayEndpoint
from vlrl.records import SAMPLING_NUCLEUS, SAMPLING_TEMPERATURE
from vlrl.rollout.trajectory import Trajectory
from vlrl.store import LocalStore
from vlrl.train.lora import PARTS
from vlrl.train.token_logprobs import token_logprobs_and_entropy

ATOL = 1e-4
LORA_RANK = 8
GREEDY = SamplingParams(temperature=0.0, max_tokens=4)
SCREEN = (240, 320)
SCREEN_BYTES = SCREEN[0] * SCREEN[1] * 3


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, ray_session, tmp_path_factory):
    """(family, checkpoint, newer weights' checkpoint, processor, engine): one replica per family
    whose pixel cache holds two screens, so a third evicts the oldest, started as a LoRA run's
    replica (vLLM's ``enable_lora``, the tower's too): until a push brings adapters it serves the
    weights alone, which the other tests check."""
    from transformers import AutoProcessor

    name = request.param
    folder = tmp_path_factory.mktemp(name)
    path = build_tiny(name, folder / "policy", rope_theta=10.0, head_dim=VLLM_HEAD_DIM)
    newer = build_tiny(name, folder / "newer", rope_theta=10.0, head_dim=VLLM_HEAD_DIM, seed=7)
    engine = cpu_engine(image_cache_mb=2.5 * SCREEN_BYTES / 2**20, lora_rank=LORA_RANK, lora_tower=True).build(model_path=str(path))
    yield name, path, newer, AutoProcessor.from_pretrained(path), engine
    ray_session.kill(engine)


def load(name: str, path) -> torch.nn.Module:
    return model_family(name).model_class.from_pretrained(path, dtype=torch.float32).eval()


def test_a_trajectory_across_a_push_stores_the_logprobs_of_the_weights_that_sampled_it(ray_session, served):
    name, path, newer, processor, engine = served
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
    screens, turns, trajectory = gui_screens(3), [], Trajectory("traj")
    client = InferenceClient([RayEndpoint(engine, "vllm")])
    sampling = SamplingParams(temperature=1.0, max_tokens=4, stop_token_ids=chat.stop_token_ids, seed=0)

    async def turn(index: int) -> None:
        turns.append(ChatTurn("Click OK." if index == 0 else "", SCREEN[::-1]))
        trajectory.set_context(chat.context(turns), screens[: index + 1])
        result = await client.generate("traj", trajectory.current.prompt_array(), screens[: index + 1], sampling, request_id=f"r{index}")
        trajectory.add_generated(result)
        turns[-1].answer, turns[-1].answer_stopped = [int(t) for t in result.token_ids], result.finish_reason == "stop"

    asyncio.run(turn(0))
    assert ray_session.get(engine.policy_version.remote()) == 0
    ray_session.get(engine.update_weights.remote(load(name, newer).state_dict(), 1))
    assert ray_session.get(engine.policy_version.remote()) == 1
    asyncio.run(turn(1))
    asyncio.run(turn(2))

    store = LocalStore()
    (meta,) = trajectory.finish(
        store, key="seq/traj", group_id="g", source="s", sample_index=0, reward=0.0, success=False,
        finish="max_turns", patch_rule=patch_rule_of(processor),
    )  # fmt: skip
    assert meta.turn_versions == (0, 1, 1) and len(meta.image_offsets) == 3
    payload = store.get([meta.key])[meta.key]
    first = np.zeros(meta.num_tokens - 1, bool)  # logprob positions t - 1 of the first turn's tokens
    first[meta.context_lengths[0] - 1 : meta.context_lengths[0] - 1 + meta.turn_tokens[0]] = True
    later = payload["loss_mask"][1:] & ~first
    stored = payload["logprobs"][1:]
    old_lp = reference_logprobs(load(name, path), processor, store, meta)
    new_lp = reference_logprobs(load(name, newer), processor, store, meta)
    np.testing.assert_allclose(stored[first], old_lp[first], atol=ATOL)
    np.testing.assert_allclose(stored[later], new_lp[later], atol=ATOL)
    assert np.abs(new_lp[later] - old_lp[later]).max() > 1e-2  # the push changed what is served

    # Prompt logprobs of the whole stored sequence (a teacher's score) under the pushed weights.
    ids = np.asarray(payload["token_ids"], np.int32)
    parts = tuple(ImagePart(s.content_hash, s.width, s.height, s.pixels) for s in screens)
    scored = ray_session.get(engine.score.remote(GenerateRequest("score", "score", ids, parts)))
    assert isinstance(scored, ScoreResult) and scored.policy_version == 1
    np.testing.assert_allclose(scored.logprobs[1:], new_lp, atol=ATOL)


def test_a_trajectory_sampled_at_temperature_and_top_p_stores_what_the_trainer_scores(ray_session, served):
    """Temperature 0.7, top-p 0.9: the stored logprob of every sampled token equals the trainer's
    score of it (``token_logprobs_and_entropy`` with the stored temperature and nucleus count) on
    a float32 forward of the weights that sampled it; without the fields it would be 0.1 off."""
    name, path, newer, processor, engine = served
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
    policy = load(name, newer)
    version = ray_session.get(engine.policy_version.remote()) + 1
    ray_session.get(engine.update_weights.remote(policy.state_dict(), version))
    screens, turns, trajectory = gui_screens(2, seed=41), [], Trajectory("sampled")
    client = InferenceClient([RayEndpoint(engine, "vllm")])
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=12, stop_token_ids=chat.stop_token_ids, seed=3)

    async def turn(index: int) -> None:
        turns.append(ChatTurn("Click OK." if index == 0 else "", SCREEN[::-1]))
        trajectory.set_context(chat.context(turns), screens[: index + 1])
        result = await client.generate("sampled", trajectory.current.prompt_array(), screens[: index + 1], sampling, request_id=f"s{index}")
        trajectory.add_generated(result)
        turns[-1].answer, turns[-1].answer_stopped = [int(t) for t in result.token_ids], result.finish_reason == "stop"

    asyncio.run(turn(0))
    asyncio.run(turn(1))
    store = LocalStore()
    (meta,) = trajectory.finish(
        store, key="seq/sampled", group_id="g", source="s", sample_index=0, reward=0.0, success=False,
        finish="max_turns", patch_rule=patch_rule_of(processor),
    )  # fmt: skip
    assert sorted(meta.extra_fields) == sorted([SAMPLING_TEMPERATURE, SAMPLING_NUCLEUS])
    payload = store.get([meta.key])[meta.key]
    ids = np.asarray(payload["token_ids"], np.int64)
    sampled = np.flatnonzero(payload["loss_mask"])  # positions of the generated tokens
    nucleus = payload[SAMPLING_NUCLEUS][sampled].astype(np.int64)
    assert np.allclose(payload[SAMPLING_TEMPERATURE][sampled], 0.7) and nucleus.min() > 1
    scored, plain = trainer_scores(policy, processor, ids, stored_images(store, meta), sampled, payload)
    stored = payload["logprobs"][sampled]
    np.testing.assert_allclose(stored, scored, atol=ATOL)
    assert np.abs(stored - plain).max() > 0.1  # the temperature and nucleus are what make them equal


def trainer_scores(policy, processor, ids, images, sampled, payload) -> tuple[np.ndarray, np.ndarray]:
    """(the trainer's logprobs of the tokens at ``sampled`` with the stored temperature and
    nucleus, the plain ``log_softmax`` ones) under a float32 forward of ``policy``."""
    logits = sequence_logits(policy, processor, ids, images)[sampled - 1]
    targets = torch.as_tensor(ids[sampled])
    temperature = torch.as_tensor(payload[SAMPLING_TEMPERATURE][sampled])
    nucleus = torch.as_tensor(payload[SAMPLING_NUCLEUS][sampled].astype(np.int64))
    scored, _ = token_logprobs_and_entropy(logits, targets, temperature, nucleus)
    plain = torch.log_softmax(logits, -1).gather(1, targets[:, None])[:, 0]
    return scored.numpy(), plain.numpy()


def test_a_drawn_placeholder_is_drawn_again_and_the_reply_keeps_the_trainers_logprobs(ray_session, served):
    """Sampled requests stop at a drawn vision placeholder and draw that position again: over 32
    seeded replies of 64 tokens at temperature 0.7, top-p 0.9 (the tiny random build gives its 4
    placeholders about 0.4% of the mass) some placeholders are drawn, none is kept, and every
    token's logprob is still the trainer's score of it."""
    name, path, newer, processor, engine = served
    if name != FAMILIES[0]:
        pytest.skip("the redraw is the engine's alike for every family")
    policy = load(name, newer)
    version = ray_session.get(engine.policy_version.remote()) + 1
    ray_session.get(engine.update_weights.remote(policy.state_dict(), version))
    config = policy.config
    banned = {config.image_token_id, config.video_token_id, config.vision_start_token_id, config.vision_end_token_id}
    prompt = np.asarray(processor.tokenizer("Click the OK button.")["input_ids"], np.int32)
    sampling = [SamplingParams(temperature=0.7, top_p=0.9, max_tokens=64, seed=i) for i in range(32)]
    before = ray_session.get(engine.stats.remote())["placeholder_redraws"]
    results = ray_session.get([engine.generate.remote(GenerateRequest(f"p{i}", f"p{i}", prompt, (), s)) for i, s in enumerate(sampling)])
    redraws = ray_session.get(engine.stats.remote())["placeholder_redraws"] - before
    assert redraws > 0 and not any(banned & set(r.token_ids.tolist()) for r in results)
    for result in results:
        ids = np.concatenate([prompt, result.token_ids]).astype(np.int64)
        sampled = np.arange(len(prompt), len(ids))
        payload = {SAMPLING_TEMPERATURE: np.concatenate([np.zeros(len(prompt), np.float32), result.extras["temperature"]]),
                   SAMPLING_NUCLEUS: np.concatenate([np.zeros(len(prompt), np.int32), result.extras["nucleus"]])}  # fmt: skip
        scored, _ = trainer_scores(policy, processor, ids, [], sampled, payload)
        np.testing.assert_allclose(result.logprobs, scored, atol=ATOL)


def test_an_image_the_replica_does_not_hold_costs_one_resend(ray_session, served):
    name, path, newer, processor, engine = served
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
    shown, others = gui_screens(2, seed=5), gui_screens(2, seed=6)
    sampling = SamplingParams(temperature=0.0, max_tokens=2, stop_token_ids=chat.stop_token_ids)

    # Never sent: the answer is a CacheMiss naming exactly that image.
    never = gui_screens(1, seed=9)[0]
    ids = np.asarray(chat.context([ChatTurn("Click OK.", SCREEN[::-1])]).ids, np.int32)
    miss = ray_session.get(engine.generate.remote(
        GenerateRequest("never", "never", ids, (ImagePart(never.content_hash, never.width, never.height, None),), sampling)
    ))  # fmt: skip
    assert isinstance(miss, CacheMiss) and miss.missing == (content_hash(never.pixels),)

    # Shipped once, then evicted by two other screens: the client's reference misses, it resends once.
    client = InferenceClient([RayEndpoint(engine, "vllm")], InferenceClient.Config(backoff_s=0))
    turns = [ChatTurn("Click OK.", SCREEN[::-1])]
    asyncio.run(client.generate("b", np.asarray(chat.context(turns).ids, np.int32), shown[:1], sampling, request_id="b0"))
    for index, screen in enumerate(others):
        other = np.asarray(chat.context([ChatTurn("Click OK.", SCREEN[::-1])]).ids, np.int32)
        asyncio.run(client.generate(f"o{index}", other, [screen], sampling, request_id=f"o{index}"))
    before = ray_session.get(engine.stats.remote())["cache_miss_replies"]
    turns[0].answer, turns[0].answer_stopped = [0], False
    turns.append(ChatTurn("", SCREEN[::-1]))
    result = asyncio.run(client.generate("b", np.asarray(chat.context(turns).ids, np.int32), shown, sampling, request_id="b1"))
    assert len(result.token_ids) > 0
    assert ray_session.get(engine.stats.remote())["cache_miss_replies"] - before == 1
    assert client.stats.cache_misses == 1


def test_a_restarted_replica_serves_the_latest_push(ray_session, served):
    """A crash after a push: Ray restarts the replica, which loads the push from its keeper before
    serving, so it answers under the pushed version with the pushed weights' logprobs."""
    name, path, newer, processor, engine = served
    if name != FAMILIES[0]:
        pytest.skip("one family shows the restart (an engine start costs about a minute)")
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
    shot = gui_screens(1, seed=11)[0]
    ids = np.asarray(chat.context([ChatTurn("Click OK.", SCREEN[::-1])]).ids, np.int32)
    request = GenerateRequest("r", "r", ids, (ImagePart(shot.content_hash, shot.width, shot.height, shot.pixels),), GREEDY)
    pushed = load(name, newer).state_dict()
    version = ray_session.get(engine.policy_version.remote()) + 1
    ray_session.get(weights_keeper(engine).keep.remote([ray_session.put(pushed)], version))  # as TrainerGroup.push_weights does
    ray_session.get(engine.update_weights.remote(pushed, version))
    before = ray_session.get(engine.generate.remote(request))
    ray_session.kill(engine, no_restart=False)  # the replica crashes; Ray starts it again
    deadline = time.monotonic() + 600
    while True:  # calls fail as "unavailable" until the new process is up (the client retries them)
        try:
            after = ray_session.get(engine.generate.remote(request), timeout=600)
            break
        except (ray_session.exceptions.ActorUnavailableError, ray_session.exceptions.RayActorError):
            assert time.monotonic() < deadline, "the replica did not come back in 600 s"
            time.sleep(2)
    assert (before.policy_version, after.policy_version) == (version, version)
    assert after.token_ids.tolist() == before.token_ids.tolist()
    np.testing.assert_allclose(after.logprobs, before.logprobs, atol=ATOL)


def test_concurrent_seeded_requests_beyond_one_steps_token_budget_are_served(ray_session, served):
    """More prompt tokens at once than vLLM schedules in one step (4096 on CPU), each request with
    its own seed: a prompt vLLM prefilled in parts leaves a sampled token to discard, and vLLM's
    CPU worker cannot rewind a seeded generator for it ("CPU Generator does not use offset", which
    ended the engine core in a 50-step run), so the CPU engine never splits a prompt."""
    name, path, newer, processor, engine = served
    if name != FAMILIES[0]:
        pytest.skip("the scheduler's behaviour is the family's alike")
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
    screen = gui_screens(1, seed=21)[0]
    ids = np.asarray(chat.context([ChatTurn("Click the OK button. " * 60, SCREEN[::-1])]).ids, np.int32)
    part = ImagePart(screen.content_hash, screen.width, screen.height, screen.pixels)
    requests = [
        GenerateRequest(f"c{i}", f"c{i}", ids, (part,), SamplingParams(temperature=1.0, max_tokens=4, seed=i)) for i in range(32)
    ]
    assert 32 * len(ids) > 3 * 4096
    results = ray_session.get([engine.generate.remote(r) for r in requests], timeout=600)
    assert all(len(r.token_ids) == 4 for r in results)
    again = ray_session.get(engine.generate.remote(requests[3]))  # a seed gives the same tokens again
    assert again.token_ids.tolist() == results[3].token_ids.tolist()


def adapters(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Random rank-8 adapters, as a LoRA trainer pushes them (``M.lora_A.weight`` = A,
    ``M.lora_B.weight`` = s B), on every linear layer of the LLM's layers, the tower's blocks and
    the merger (DeepStack mergers included)."""
    generator = torch.Generator().manual_seed(seed)
    prefixes = tuple(p for part in PARTS.values() for p in part)
    push = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name.startswith(prefixes):
            push[f"{name}.lora_A.weight"] = torch.randn(LORA_RANK, module.in_features, generator=generator) * 0.2
            push[f"{name}.lora_B.weight"] = torch.randn(module.out_features, LORA_RANK, generator=generator) * 0.1
    return push


def merged(model: torch.nn.Module, push: dict[str, torch.Tensor]) -> torch.nn.Module:
    """``model`` with ``W + (s B) A`` in every adapted layer: what the trainer's PEFT forward
    computes (tests/unit/train/test_lora.py checks the two agree)."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for key, a in push.items():
        if key.endswith(".lora_A.weight"):
            module = key.removesuffix(".lora_A.weight")
            state[f"{module}.weight"] += push[f"{module}.lora_B.weight"] @ a
    copy = type(model)(model.config).eval()
    copy.load_state_dict(state)
    return copy


def test_a_lora_push_serves_the_adapters_logprobs(ray_session, served):
    """A LoRA trainer's first push (its whole base and the adapters on the LLM, the tower and the
    merger), then one of adapters alone, then one without adapters (a full-weight warm start's):
    vLLM's prompt logprobs of a two-image sequence equal a float32 forward of the base with each
    push's adapters merged in, and of the base alone after the last; the adapters move them by
    more than 1e-2, so a replica that dropped them would fail."""
    name, path, newer, processor, engine = served
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
    screens = gui_screens(2, seed=31)
    ids = np.asarray(chat.context([ChatTurn("Click OK.", SCREEN[::-1]), ChatTurn("", SCREEN[::-1])]).ids, np.int32)
    parts = tuple(ImagePart(s.content_hash, s.width, s.height, s.pixels) for s in screens)
    pixels = [s.pixels for s in screens]
    base = load(name, newer)
    first, later = adapters(base, seed=1), adapters(base, seed=2)
    version = ray_session.get(engine.policy_version.remote())

    def served_logprobs(push: dict[str, torch.Tensor], version: int) -> np.ndarray:
        ray_session.get(engine.update_weights.remote(push, version))
        scored = ray_session.get(engine.score.remote(GenerateRequest(f"lora{version}", "lora", ids, parts)))
        assert isinstance(scored, ScoreResult) and scored.policy_version == version
        return scored.logprobs[1:]

    base_lp = sequence_logprobs(base, processor, ids, pixels)
    for push, expected in (({**base.state_dict(), **first}, merged(base, first)), (later, merged(base, later))):
        version += 1
        reference = sequence_logprobs(expected, processor, ids, pixels)
        np.testing.assert_allclose(served_logprobs(push, version), reference, atol=ATOL)
        assert np.abs(reference - base_lp).max() > 1e-2  # the adapters change what is served
    np.testing.assert_allclose(served_logprobs(base.state_dict(), version + 1), base_lp, atol=ATOL)
    assert ray_session.get(engine.stats.remote())["lora_adapters"] == 1.0
