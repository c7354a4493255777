"""Sampled tokens and their logprobs are exactly the engine's samples under the raw policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.chat import part, policy_logprobs, request, run_core, screen, user_turn
from vlrl.rollout.protocol import SamplingParams


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_logprobs_are_raw_policy_logprobs_of_the_sampled_tokens(tiny_path, processor, temperature, top_p):
    shot = screen(320, 240, 5)
    prompt = user_turn(processor, "click the Cancel button", [shot])
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=12, seed=3)

    async def body(core):
        return await core.generate(request(prompt, (part(shot),), sampling=sampling))

    result = run_core(tiny_path, body)
    assert result.token_ids.dtype == np.int32 and result.logprobs.dtype == np.float32
    reference = policy_logprobs(tiny_path, processor, prompt, shot, result.token_ids)
    sampled = torch.from_numpy(result.token_ids.astype(np.int64))
    np.testing.assert_allclose(result.logprobs, reference.gather(1, sampled[:, None])[:, 0].numpy(), atol=1e-4)
    if temperature == 0:
        np.testing.assert_array_equal(sampled.numpy(), reference.argmax(-1).numpy())
    if top_p < 1:  # every draw lies in the top-p nucleus of the tempered distribution
        probs = torch.softmax(reference / temperature, dim=-1)
        mass_above = (probs * (probs > probs.gather(1, sampled[:, None]))).sum(-1)
        assert (mass_above < top_p).all()


def test_seeded_requests_replay_and_seeds_differ(tiny_path, processor):
    prompt = user_turn(processor, "scroll down then click Next", [])

    def sampled(seed):
        return request(prompt, sampling=SamplingParams(temperature=1.0, max_tokens=16, seed=seed))

    async def body(core):
        return [(await core.generate(sampled(seed))).token_ids for seed in (7, 7, 8)]

    first, again, other = run_core(tiny_path, body)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_stop_token_ends_generation_and_is_returned(tiny_path, processor):
    prompt = user_turn(processor, "press enter", [])

    async def body(core):
        free = await core.generate(request(prompt))
        tokens = free.token_ids.tolist()
        k = next(i for i in range(1, len(tokens)) if tokens[i] not in tokens[:i])
        stopped = await core.generate(
            request(prompt, sampling=SamplingParams(temperature=0.0, max_tokens=8, stop_token_ids=(tokens[k],)))
        )
        return free, stopped, k

    free, stopped, k = run_core(tiny_path, body)
    assert free.finish_reason == "length" and len(free.token_ids) == 8
    assert stopped.finish_reason == "stop"
    np.testing.assert_array_equal(stopped.token_ids, free.token_ids[: k + 1])
    np.testing.assert_allclose(stopped.logprobs, free.logprobs[: k + 1], atol=1e-5)


def test_vision_placeholders_are_never_sampled():
    import torch

    from vlrl.rollout.engine.sampling import sample
    from vlrl.rollout.protocol import SamplingParams

    logits = torch.zeros(4, 6)
    logits[:, 3] = 50.0  # the placeholder would win every draw
    params = [SamplingParams(temperature=t) for t in (0.0, 1.0, 1.0, 2.0)]
    generators = [None] + [torch.Generator().manual_seed(i) for i in range(3)]
    ids, logprobs = sample(logits, params, generators, banned=torch.tensor([3]))
    assert 3 not in ids.tolist()
    raw = torch.log_softmax(logits, -1)
    assert torch.allclose(logprobs, raw.gather(1, ids[:, None])[:, 0])
