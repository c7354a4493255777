"""Dynamic batching: concurrent requests share decode batches and get what they would alone."""

from __future__ import annotations

import asyncio

import numpy as np
import torch
from transformers import Qwen2VLForConditionalGeneration

from tests.helpers.chat import mixed_requests, part, request, run_core, screen, turn_text, user_turn


def test_concurrent_requests_share_batches_and_match_one_at_a_time(tiny_path, processor):
    requests = mixed_requests(processor)

    async def together(core):
        results = await asyncio.gather(*(core.generate(r) for r in requests))
        return results, core.stats()

    async def one_at_a_time(core):
        return [await core.generate(r) for r in requests], core.stats()

    batched, stats = run_core(tiny_path, together, max_batch=8, batch_wait_ms=100)
    alone, alone_stats = run_core(tiny_path, one_at_a_time, max_batch=8)
    assert stats["batches"] < len(requests)
    assert stats["max_batch_size"] > 1
    assert alone_stats["batches"] == len(requests)
    for b, a in zip(batched, alone):
        assert b.request_id == a.request_id
        np.testing.assert_array_equal(b.token_ids, a.token_ids)
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-4)
        assert b.prefill_tokens == a.prefill_tokens
        assert b.finish_reason == a.finish_reason and b.policy_version == 0


def test_max_batch_caps_batch_size(tiny_path, processor):
    requests = mixed_requests(processor, n=6)

    async def body(core):
        await asyncio.gather(*(core.generate(r) for r in requests))
        return core.stats()

    stats = run_core(tiny_path, body, max_batch=2, batch_wait_ms=100)
    assert stats["max_batch_size"] == 2 and stats["batches"] == 3


def test_greedy_decoding_matches_transformers_generate(tiny_path, processor):
    """Positions (M-RoPE over the image), masks and stop handling agree with the reference."""
    shot = screen(320, 240, 4)
    text = turn_text("type hello then press submit", 1)
    inputs = processor(text=[text], images=[shot], return_tensors="pt")
    model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_path).eval()
    with torch.inference_mode():
        expected = model.generate(**inputs, max_new_tokens=8, do_sample=False)[0, inputs["input_ids"].shape[1] :]

    async def body(core):
        return await core.generate(request(user_turn(processor, "type hello then press submit", [shot]), (part(shot),)))

    result = run_core(tiny_path, body)
    np.testing.assert_array_equal(result.token_ids, expected.numpy())


def test_load_counts_requests_until_answered(tiny_path, processor):
    requests = mixed_requests(processor, n=4)

    async def body(core):
        tasks = [asyncio.ensure_future(core.generate(r)) for r in requests]
        await asyncio.sleep(0)
        during = core.load()
        await asyncio.gather(*tasks)
        return during, core.load()

    assert run_core(tiny_path, body) == (4, 0)
