"""A hybrid linear-attention family (Qwen3.5) in the embedded engine: fresh prompts share a batch,
a trajectory's next turn continues from the kept recurrent state, and every logprob equals a plain
transformers forward of the whole sequence, with and without prefix reuse."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from transformers import AutoProcessor

from tests.helpers.chat import forward_log_softmax, part, request, run_core, screen, user_turn
from vlrl.models import build_tiny, family
from vlrl.rollout.protocol import SamplingParams

SAMPLED = SamplingParams(temperature=1.0, max_tokens=6, seed=3)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    path = build_tiny("qwen3_5", tmp_path_factory.mktemp("qwen3_5"))
    return path, AutoProcessor.from_pretrained(path), family("qwen3_5").load(path).eval()


def forward_logprobs(model, processor, prompt, generated, shots) -> np.ndarray:
    """log p of each ``generated`` token under one transformers forward of prompt + generated."""
    picked = forward_log_softmax(model, processor, prompt, generated, shots)
    return picked.gather(1, torch.as_tensor(generated, dtype=torch.long)[:, None])[:, 0].numpy()


def test_turns_reuse_the_recurrent_state_and_match_transformers(hybrid):
    path, processor, model = hybrid
    assert {"linear_attention", "full_attention"} <= set(model.config.text_config.layer_types)
    shots = [screen(320, 240, 30), screen(200, 150, 31)]

    async def body(core):
        prompt1 = user_turn(processor, "open the File menu", shots[:1])
        # Turn 1 shares its batch with fresh prompts of other lengths (left pads before a zero state).
        others = [request(user_turn(processor, "x " * n, []), sampling=SAMPLED) for n in (3, 40)]
        r1, *_ = await asyncio.gather(
            core.generate(request(prompt1, (part(shots[0]),), trajectory="t", sampling=SAMPLED)), *map(core.generate, others)
        )
        prompt2 = np.concatenate([prompt1, r1.token_ids, user_turn(processor, "now click Save", shots[1:], first=False)])
        images = (part(shots[0], send=False), part(shots[1]))
        # Turn 2 continues the state while another fresh prompt arrives with it.
        r2, _ = await asyncio.gather(
            core.generate(request(prompt2.astype(np.int32), images, trajectory="t", sampling=SAMPLED)),
            core.generate(request(user_turn(processor, "y " * 9, []), sampling=SAMPLED)),
        )
        scratch2 = await core.generate(request(prompt2.astype(np.int32), images, trajectory="fresh", sampling=SAMPLED))
        # An edited history shares only part of the cached sequence: the state cannot stand for it.
        edited = prompt2.copy()
        edited[len(prompt1) + 1] = edited[len(prompt1) + 2]
        r_edit = await core.generate(request(edited.astype(np.int32), images, trajectory="t", sampling=SAMPLED))
        return (prompt1, r1), (prompt2, r2, scratch2), r_edit, core.stats()

    (prompt1, r1), (prompt2, r2, scratch2), r_edit, stats = run_core(path, body, batch_wait_ms=50)
    cached = len(prompt1) + len(r1.token_ids) - 1
    assert r2.reused_prefix_tokens == cached and r2.prefill_tokens == len(prompt2) - cached
    assert scratch2.reused_prefix_tokens == 0 and r_edit.reused_prefix_tokens == 0
    np.testing.assert_array_equal(r2.token_ids, scratch2.token_ids)  # same seed, same draws
    np.testing.assert_allclose(r2.logprobs, scratch2.logprobs, atol=1e-5)
    np.testing.assert_allclose(r1.logprobs, forward_logprobs(model, processor, prompt1, r1.token_ids, shots[:1]), atol=1e-5)
    np.testing.assert_allclose(r2.logprobs, forward_logprobs(model, processor, prompt2, r2.token_ids, shots), atol=1e-5)
    assert stats["max_batch_size"] == 3
