"""Sampled tokens and their logprobs are exactly the engine's samples under the distribution it
drew them from: temperature and the top-p nucleus applied, the raw policy at temperature 1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.chat import part, policy_logprobs, request, run_core, screen, user_turn
from vlrl.rollout.engine.sampling import nucleus_logprob, nucleus_size, sample, sampled_extras, sampled_fields
from vlrl.rollout.protocol import SamplingParams


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9), (0.7, 1.0), (0.0, 1.0)])
def test_logprobs_are_those_of_the_sampling_distribution(tiny_path, processor, temperature, top_p):
    shot = screen(320, 240, 5)
    prompt = user_turn(processor, "click the Cancel button", [shot])
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=12, seed=3)

    async def body(core):
        return await core.generate(request(prompt, (part(shot),), sampling=sampling))

    result = run_core(tiny_path, body)
    assert result.token_ids.dtype == np.int32 and result.logprobs.dtype == np.float32
    reference = policy_logprobs(tiny_path, processor, prompt, shot, result.token_ids)  # (n, V) at temperature 1
    sampled = torch.from_numpy(result.token_ids.astype(np.int64))
    z = reference / (temperature or 1.0)  # softmax(z) = softmax(logits / T): log_softmax only shifts each row
    kept = [0] * len(sampled)
    if top_p < 1:  # the smallest top set of the tempered distribution whose mass reaches top_p
        probs = torch.softmax(z, dim=-1).sort(dim=-1, descending=True).values
        kept = ((probs.cumsum(-1) - probs) < top_p).sum(-1).tolist()
        assert result.extras["nucleus"].tolist() == kept and result.extras["nucleus"].dtype == np.int32
        mass_above = (torch.softmax(z, dim=-1) * (z > z.gather(1, sampled[:, None]))).sum(-1)
        assert (mass_above < top_p).all()  # every draw lies in the nucleus
    expected = [(zi[zi >= zi.sort(descending=True).values[k - 1]] if k else zi).logsumexp(-1) for zi, k in zip(z, kept)]
    expected = z.gather(1, sampled[:, None])[:, 0] - torch.stack(expected)
    np.testing.assert_allclose(result.logprobs, expected.numpy(), atol=1e-4)
    assert sorted(result.extras) == sorted(name.removeprefix("extra/") for name in sampled_fields(sampling))
    if temperature not in (0, 1):
        np.testing.assert_array_equal(result.extras["temperature"], np.float32(temperature))
    if temperature == 0:
        np.testing.assert_array_equal(sampled.numpy(), reference.argmax(-1).numpy())


def test_temperature_1_without_top_p_writes_no_field_and_reports_log_softmax_bit_for_bit():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 4
    params = [SamplingParams(temperature=1.0, seed=i) for i in range(3)]
    ids, logprobs, nucleus = sample(logits, params, [torch.Generator().manual_seed(i) for i in range(3)])
    assert torch.equal(logprobs, torch.log_softmax(logits, -1).gather(1, ids[:, None])[:, 0])
    assert nucleus == [0, 0, 0] and sampled_extras(params[0], nucleus) == {}
    assert sampled_fields(SamplingParams(temperature=0.0, top_p=0.5)) == ()


def test_the_nucleus_count_keeps_ties_and_the_logprob_keeps_the_sampled_token():
    z = torch.tensor([3.0, 1.0, 1.0, 0.0, -2.0])
    assert nucleus_size(z, 0.5) == 1 and nucleus_size(z, 0.95) == 3  # the two tied 1.0s go in together
    assert nucleus_size(z, 1e-40) == 1
    torch.testing.assert_close(nucleus_logprob(z, 1, 3), z[1] - z[:3].logsumexp(-1))
    torch.testing.assert_close(nucleus_logprob(z, 3, 3), z[3] - z[:4].logsumexp(-1))  # a token past the count is kept
    torch.testing.assert_close(nucleus_logprob(z, 4, 0), torch.log_softmax(z, -1)[4])


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
    logits = torch.zeros(4, 6)
    logits[:, 3] = 50.0  # the placeholder would win every draw
    params = [SamplingParams(temperature=t) for t in (0.0, 1.0, 1.0, 2.0)]
    generators = [None] + [torch.Generator().manual_seed(i) for i in range(3)]
    ids, logprobs, _ = sample(logits, params, generators, banned=torch.tensor([3]))
    assert 3 not in ids.tolist()
    tempered = torch.log_softmax(logits / torch.tensor([1.0, 1.0, 1.0, 2.0])[:, None], -1)  # placeholders in the normaliser
    assert torch.allclose(logprobs, tempered.gather(1, ids[:, None])[:, 0])
    top = SamplingParams(temperature=1.0, top_p=0.5)  # the nucleus is the placeholder alone: drawn from the rest
    ids, logprobs, nucleus = sample(logits[:1], [top], [torch.Generator().manual_seed(0)], banned=torch.tensor([3]))
    assert ids.item() != 3 and nucleus == [1]
    assert torch.allclose(logprobs, torch.log_softmax(logits[0], -1)[ids])  # its nucleus: every logit >= its own
