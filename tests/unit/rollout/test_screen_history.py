"""Older screenshots in a long episode's prompt: left out, shrunk to a token budget, or a stub;
the shrunk ones cost exactly the tokens the model's processor gives them."""

from __future__ import annotations

import numpy as np
import pytest

from vlrl.config import AgentBehaviour, ConfigError
from vlrl.mm import patch_rule_of
from vlrl.rollout.chat import ChatFormat, ChatTurn
from vlrl.rollout.parsers import PARSERS
from vlrl.rollout.screen_history import OLDER_STUB, ScreenHistory, check_older_image_tokens


def _screens(n: int, width: int = 320, height: int = 240) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(n)]


def _prompt(processor, agent: AgentBehaviour, screens: list[np.ndarray]):
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent-short", PARSERS["qwen25vl"].describe())
    history = ScreenHistory(agent, patch_rule_of(processor))
    turns = []
    for pixels in screens:
        screen = history.add(pixels)
        turns.append(ChatTurn("", (screen.width, screen.height)))
        turns[-1].answer = [chat.stop_token_ids[0]]
    shown, images = history.shown()
    return chat.context(turns, shown), images, history


def _image_tokens(processor, ids: list[int]) -> int:
    return ids.count(processor.tokenizer.convert_tokens_to_ids("<|image_pad|>"))


def test_shrunk_older_screenshots_cost_exactly_the_tokens_the_processor_gives_them(processor):
    agent = AgentBehaviour(history_images=2, older_images="downscale", older_image_tokens=12)
    context, images, _ = _prompt(processor, agent, _screens(5))
    assert len(images) == len(context.image_offsets) == 5
    sizes = [(i.width, i.height) for i in images]
    assert sizes[3:] == [(320, 240)] * 2 and all(w < 320 and h < 240 for w, h in sizes[:3])
    grids = processor.image_processor(images=[i.pixels for i in images], return_tensors="np")["image_grid_thw"]
    produced = [int(np.prod(g)) // processor.image_processor.merge_size**2 for g in grids]
    assert all(n <= 12 for n in produced[:3]) and produced[3] > 12  # the budget binds, and only on older screens
    assert _image_tokens(processor, context.ids) == sum(produced)  # the chat's placeholders are the encoder's tokens


def test_a_shrunk_screenshot_is_made_once_so_it_travels_once():
    from vlrl.mm import PatchRule

    agent = AgentBehaviour(history_images=1, older_images="downscale", older_image_tokens=8)
    history = ScreenHistory(agent, PatchRule(min_pixels=56 * 56, max_pixels=224 * 224))
    for pixels in _screens(3):
        history.add(pixels)
        first = history.shown()[1][0]
    assert history.shown()[1][0] is first  # the same object (and content hash) on every later turn


def test_stubs_and_drops_keep_the_text_and_no_pixels(processor):
    screens = _screens(4)
    stub, stub_images, _ = _prompt(processor, AgentBehaviour(history_images=1, older_images="stub"), screens)
    drop, drop_images, _ = _prompt(processor, AgentBehaviour(history_images=1), screens)
    whole, _, _ = _prompt(processor, AgentBehaviour(), screens)
    assert len(stub_images) == len(drop_images) == 1
    text = processor.tokenizer.decode(stub.ids)
    assert text.count(OLDER_STUB) == 3 and OLDER_STUB not in processor.tokenizer.decode(drop.ids)
    one = _image_tokens(processor, whole.ids) // 4
    assert _image_tokens(processor, stub.ids) == _image_tokens(processor, drop.ids) == one


def test_a_budget_below_the_rules_minimum_is_refused_naming_the_field(processor):
    rule = patch_rule_of(processor)
    agent = AgentBehaviour(history_images=2, older_images="downscale", older_image_tokens=1)
    with pytest.raises(ConfigError, match=r"sources\[0\].agent.older_image_tokens.*at least 4"):
        check_older_image_tokens(agent, rule, 320, 240, "sources[0].agent.older_image_tokens")
    check_older_image_tokens(AgentBehaviour(history_images=2, older_images="stub", older_image_tokens=1), rule, 320, 240, "f")
