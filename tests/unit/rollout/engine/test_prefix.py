"""KV prefix reuse: a trajectory's next turn computes only its new tokens, and gets the same answer."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from tests.helpers.chat import part, request, run_core, screen, user_turn
from vlrl.rollout.engine.prefix import ImageSpan, KVPrefix

A, B = "a" * 32, "b" * 32
P = 3  # the image pad id in these sequences
CACHED = KVPrefix(tokens=np.array([1, 2, P, P, 5]), images=(ImageSpan(2, 4, A),), kv=())


@pytest.mark.parametrize(
    "prompt, images, expected",
    [
        ([1, 2, P, P, 5, 9, 9], (ImageSpan(2, 4, A),), 5),  # the whole cached sequence
        ([1, 2, P, P, 5], (ImageSpan(2, 4, A),), 4),  # the last prompt token is always computed
        ([1, 2, 7, 4, 5, 9], (), 2),  # up to the first differing token
        ([1, 2, P, P, 5, 6, 7], (ImageSpan(2, 4, B),), 2),  # same pads, another image
        ([1, 2, P, P, P, 6], (ImageSpan(2, 5, A),), 2),  # the image's run differs
        ([1, 2, P, P], (ImageSpan(2, 4, A),), 2),  # never ends inside an image
    ],
)
def test_shared_length(prompt, images, expected):
    assert CACHED.shared_length(np.array(prompt), images) == expected


def next_turn(processor, prompt, result, text, shot):
    return np.concatenate([prompt, result.token_ids, user_turn(processor, text, [shot], first=False)]).astype(np.int32)


def test_next_turn_reuses_the_prefix_and_matches_from_scratch(tiny_path, processor):
    shots = [screen(320, 240, 10), screen(320, 240, 11), screen(200, 150, 12)]

    async def body(core):
        prompt1 = user_turn(processor, "open the File menu", shots[:1])
        images = (part(shots[0]),)
        r1 = await core.generate(request(prompt1, images, trajectory="t"))
        prompt2 = next_turn(processor, prompt1, r1, "now click Save", shots[1])
        images = (part(shots[0], send=False), part(shots[1]))
        # Turn 2 shares its batch with fresh requests of other prompt lengths.
        others = [request(user_turn(processor, "x " * n, [])) for n in (3, 40)]
        r2, *_ = await asyncio.gather(*(core.generate(r) for r in [request(prompt2, images, trajectory="t"), *others]))
        scratch2 = await core.generate(request(prompt2, images, trajectory="fresh"))
        prompt3 = next_turn(processor, prompt2, r2, "type hello", shots[2])
        images = (*(part(s, send=False) for s in shots[:2]), part(shots[2]))
        r3 = await core.generate(request(prompt3, images, trajectory="t"))
        scratch3 = await core.generate(request(prompt3, images, trajectory="fresh3"))
        return (prompt1, r1), (prompt2, r2, scratch2), (prompt3, r3, scratch3), core.stats()

    (prompt1, r1), turn2, turn3, stats = run_core(tiny_path, body, batch_wait_ms=50)
    for (prompt, reused, scratch), previous in ((turn2, (prompt1, r1)), (turn3, turn2[:2])):
        cached = len(previous[0]) + len(previous[1].token_ids) - 1  # the last sampled token was never fed
        assert reused.reused_prefix_tokens == cached
        assert reused.prefill_tokens == len(prompt) - cached
        assert scratch.reused_prefix_tokens == 0 and scratch.prefill_tokens == len(prompt)
        np.testing.assert_array_equal(reused.token_ids, scratch.token_ids)
        np.testing.assert_allclose(reused.logprobs, scratch.logprobs, atol=1e-4)
    assert stats["reused_prefix_tokens"] == turn2[1].reused_prefix_tokens + turn3[1].reused_prefix_tokens
    assert stats["max_batch_size"] == 3


def test_diverging_prompt_reuses_only_the_common_part(tiny_path, processor):
    shot, other = screen(320, 240, 20), screen(320, 240, 21)

    async def body(core):
        prompt = user_turn(processor, "click OK", [shot])
        await core.generate(request(prompt, (part(shot),), trajectory="t"))
        edited = user_turn(processor, "click Cancel", [shot])
        r_edit = await core.generate(request(edited, (part(shot),), trajectory="t"))
        # Same tokens, another image: nothing from the image on is reused.
        r_image = await core.generate(request(prompt, (part(other),), trajectory="t"))
        scratch = await core.generate(request(prompt, (part(other),), trajectory="fresh"))
        return prompt, edited, r_edit, r_image, scratch

    prompt, edited, r_edit, r_image, scratch = run_core(tiny_path, body)
    common = int(np.flatnonzero(prompt[: len(edited)] != edited[: len(prompt)])[0])
    assert r_edit.reused_prefix_tokens == common
    image_start = int(np.flatnonzero(prompt == processor.image_token_id)[0])
    assert r_image.reused_prefix_tokens == image_start
    np.testing.assert_array_equal(r_image.token_ids, scratch.token_ids)
    np.testing.assert_allclose(r_image.logprobs, scratch.logprobs, atol=1e-4)


def test_forget_and_the_trajectory_bound_drop_prefixes(tiny_path, processor):
    async def body(core):
        turns = {}
        for trajectory in ("t1", "t2", "t3"):
            prompt = user_turn(processor, f"task {trajectory}", [])
            turns[trajectory] = (prompt, await core.generate(request(prompt, trajectory=trajectory)))
        core.forget("t3")
        reused = {}
        for trajectory in ("t3", "t2", "t1"):  # t1 was dropped by the bound of 2
            prompt, result = turns[trajectory]
            follow = np.concatenate([prompt, result.token_ids, user_turn(processor, "next", [], first=False)])
            reused[trajectory] = (await core.generate(request(follow, trajectory=trajectory))).reused_prefix_tokens
        return reused

    reused = run_core(tiny_path, body, max_cached_trajectories=2)
    assert reused["t1"] == 0 and reused["t3"] == 0 and reused["t2"] > 0


def test_a_branchs_first_request_continues_its_roots_prefix_and_counts_it(tiny_path, processor):
    """A branch (``GenerateRequest.fork_of``) shares its root's first turn and goes on with its
    own second turn: the engine computes only what is new after the fork, answers as from scratch,
    and its own counters say so."""
    shots = [screen(320, 240, 30), screen(320, 240, 31)]

    async def body(core):
        prompt1 = user_turn(processor, "open the File menu", shots[:1])
        r1 = await core.generate(request(prompt1, (part(shots[0]),), trajectory="root"))
        prompt2 = next_turn(processor, prompt1, r1, "now click Save", shots[1])
        images = (part(shots[0], send=False), part(shots[1]))
        before = core.stats()
        branch = await core.generate(replace(request(prompt2, images, trajectory="branch"), fork_of="root"))
        after = core.stats()
        unforked = await core.generate(request(prompt2, images, trajectory="other"))
        return prompt1, r1, prompt2, branch, unforked, before, after

    prompt1, r1, prompt2, branch, unforked, before, after = run_core(tiny_path, body)
    shared = len(prompt1) + len(r1.token_ids) - 1  # the root's cache: its prompt and all it sampled but the last
    assert branch.reused_prefix_tokens == shared and branch.prefill_tokens == len(prompt2) - shared
    assert after["reused_prefix_tokens"] - before["reused_prefix_tokens"] == shared
    assert after["prefill_tokens"] - before["prefill_tokens"] == len(prompt2) - shared
    assert unforked.reused_prefix_tokens == 0
    np.testing.assert_array_equal(branch.token_ids, unforked.token_ids)
    np.testing.assert_allclose(branch.logprobs, unforked.logprobs, atol=1e-4)
