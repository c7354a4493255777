"""Weight updates land between batches, tag versions, drop KV prefixes and keep images."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from tests.helpers.chat import (
    model_state,
    part,
    perturbed,
    policy_logprobs,
    request,
    run_core,
    screen,
    user_turn,
)
from vlrl.rollout.protocol import SamplingParams


def test_update_waits_for_the_batch_in_flight_and_tags_versions(tiny_path, processor):
    shot = screen(320, 240, 40)
    prompt = user_turn(processor, "click Submit", [shot])
    update = perturbed(tiny_path)

    async def body(core):
        long = request(prompt, (part(shot),), trajectory="t", sampling=SamplingParams(temperature=0.0, max_tokens=64))
        in_flight = asyncio.ensure_future(core.generate(long))
        while core.stats()["batches"] == 0:
            await asyncio.sleep(0.001)
        assert not in_flight.done()
        await core.update_weights(update, version=1)
        assert in_flight.done()  # it finished on the old weights before the update landed
        old = in_flight.result()
        follow = np.concatenate([prompt, old.token_ids, user_turn(processor, "next", [], first=False)])
        new = await core.generate(request(follow, (part(shot, send=False),), trajectory="t"))
        return old, follow, new, core.policy_version(), core.stats()

    old, follow, new, version, stats = run_core(tiny_path, body)
    assert old.policy_version == 0 and len(old.token_ids) == 64
    assert new.policy_version == 1 and version == 1
    assert new.reused_prefix_tokens == 0  # the KV prefix died with the old weights
    assert stats["image_cache_hits"] == 1 and stats["cache_miss_replies"] == 0  # the image did not
    # The new answer is the new policy's: recompute it with the updated weights.
    reference = policy_logprobs(tiny_path, processor, follow, shot, new.token_ids, update=update)
    np.testing.assert_array_equal(new.token_ids, reference.argmax(-1).numpy())
    chosen = reference.gather(1, torch.from_numpy(new.token_ids.astype(np.int64))[:, None])[:, 0]
    np.testing.assert_allclose(new.logprobs, chosen.numpy(), atol=1e-4)


def test_default_stop_is_im_end(tiny_path, processor):
    """Make <|im_end|> the greedy choice; generation stops on it without any stop_token_ids."""
    prompt = user_turn(processor, "done", [])
    im_end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    head = model_state(tiny_path)["lm_head.weight"].clone()

    async def body(core):
        first = (await core.generate(request(prompt))).token_ids[0]
        head[im_end] = 2 * head[first]  # its logit doubles the (positive) top logit
        await core.update_weights({"lm_head.weight": head}, version=1)
        return await core.generate(request(prompt, sampling=SamplingParams(temperature=0.0, max_tokens=8)))

    result = run_core(tiny_path, body)
    assert result.finish_reason == "stop" and result.token_ids.tolist() == [im_end]


@pytest.mark.parametrize(
    "update, version, expected",
    [
        ({"lm_head.weight": np.zeros((3, 3), np.float32)}, 1, r"lm_head.weight has shape \(3, 3\); the model's is"),
        ({"no.such.weight": np.zeros(3, np.float32)}, 1, r"1 unknown name\(s\), e.g. \['no.such.weight'\]"),
        ({}, 0, r"version=0; expected more than the latest, 0"),
    ],
)
def test_bad_updates_are_refused_and_change_nothing(tiny_path, update, version, expected):
    async def body(core):
        with pytest.raises(ValueError, match=expected):
            await core.update_weights(update, version)
        return core.policy_version(), core.stats()["weight_updates"]

    assert run_core(tiny_path, body) == (0, 0)
