"""Images by reference, cache misses and resends, and bad requests refused with clear errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.helpers.chat import part, request, run_core, screen, user_turn
from vlrl.mm import patch_rule_of
from vlrl.rollout.protocol import CacheMiss, GenerateResult, ImagePart


def test_evicted_image_misses_then_succeeds_when_resent(tiny_path, processor):
    a, b = screen(320, 240, 30), screen(320, 240, 31)  # ~1 MiB of pixel_values each
    prompt_a = user_turn(processor, "click OK", [a])
    prompt_b = user_turn(processor, "click OK", [b])

    async def body(core):
        first = await core.generate(request(prompt_a, (part(a),)))
        by_reference = await core.generate(request(prompt_a, (part(a, send=False),)))
        await core.generate(request(prompt_b, (part(b),)))  # evicts a
        batches = core.stats()["batches"]
        miss = await core.generate(request(prompt_a, (part(a, send=False),)))
        assert core.stats()["batches"] == batches  # a miss runs nothing
        resent = await core.generate(request(prompt_a, (part(a),)))
        return first, by_reference, miss, resent, core.stats()

    first, by_reference, miss, resent, stats = run_core(tiny_path, body, image_cache_mb=1.5)
    assert isinstance(by_reference, GenerateResult)
    assert miss == CacheMiss(miss.request_id, (part(a).content_hash,))
    assert isinstance(resent, GenerateResult)
    np.testing.assert_array_equal(resent.token_ids, first.token_ids)
    assert stats["image_cache_evictions"] >= 1 and stats["image_cache_misses"] == 1
    assert stats["image_cache_hits"] == 1 and stats["cache_miss_replies"] == 1
    assert stats["image_bytes_received"] == 3 * a.nbytes


def test_a_new_engine_misses_every_reference_and_names_only_the_missing(tiny_path, processor):
    a, b = screen(320, 240, 32), screen(200, 150, 33)
    prompt = user_turn(processor, "compare", [a, b])

    async def body(core):  # a restarted replica: empty caches
        return await core.generate(request(prompt, (part(a), part(b, send=False))))

    miss = run_core(tiny_path, body)
    assert isinstance(miss, CacheMiss) and miss.missing == (part(b).content_hash,)


def test_image_token_count_must_match_the_image(tiny_path, processor):
    big, small = screen(320, 240, 34), screen(200, 150, 35)
    prompt = user_turn(processor, "click", [big])  # pads for the 320x240 image
    rule = patch_rule_of(processor)
    image = part(small)
    message = (
        f"image {image.content_hash}: prompt_ids hold {rule.num_tokens(320, 240)} <|image_pad|> tokens"
        f" for it but its 200x150 pixels make {rule.num_tokens(200, 150)} tokens"
    )

    async def body(core):
        with pytest.raises(ValueError, match=re.escape(message)):
            await core.generate(request(prompt, (image,)))
        return await core.generate(request(prompt, (part(big),)))  # the engine serves on

    assert isinstance(run_core(tiny_path, body), GenerateResult)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("image without pads", r"prompt_ids hold 0 run\(s\) of <\|image_pad\|> .* but 1 image\(s\) were sent"),
        ("pads without image", r"prompt_ids hold 1 run\(s\) of <\|image_pad\|> .* but 0 image\(s\) were sent"),
        ("wrong hash", r"image 0{32}: the pixels sent hash to [0-9a-f]{32}"),
        ("id beyond vocab", r"expected 0 <= id < vocab_size=1024"),
        ("empty prompt", r"prompt_ids is empty"),
    ],
)
def test_bad_requests_are_refused(tiny_path, processor, case, expected):
    shot = screen(320, 240, 36)
    with_pads = user_turn(processor, "click", [shot])
    without_pads = user_turn(processor, "click", [])
    bad = {
        "image without pads": request(without_pads, (part(shot),)),
        "pads without image": request(with_pads),
        "wrong hash": request(with_pads, (ImagePart("0" * 32, 320, 240, shot),)),
        "id beyond vocab": request(np.append(without_pads, 5000).astype(np.int32)),
        "empty prompt": request(np.zeros(0, dtype=np.int32)),
    }[case]

    async def body(core):
        with pytest.raises(ValueError, match=expected):
            await core.generate(bad)
        return core.load(), core.stats()["image_cache_entries"]

    assert run_core(tiny_path, body) == (0, 0)

