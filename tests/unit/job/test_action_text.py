"""Oracle actions written as model replies parse back to the same action (the parsers' inverse)."""

from __future__ import annotations

import pytest

from vlrl.harness import Action
from vlrl.job.action_text import UnwritableAction, action_text, demo_reply
from vlrl.rollout.parsers import ScreenMap

SAME = ScreenMap(224, 168, 224, 168)
"""The model sees the screen at its own size: points round-trip exactly."""
RESIZED = ScreenMap(160, 120, 168, 112)
"""A 160x120 screen shown as 168x112 (the tiny model's patch rule)."""

ACTIONS = [
    Action.click(56, 68),
    Action.double_click(0, 0),
    Action.right_click(223, 167),
    Action.move(100, 20),
    Action.drag(10, 20, 200, 150),
    Action.type('say "hi"\tthere'),
    Action.key("ctrl", "a"),
    Action.key("enter"),
    Action.scroll(112, 84, down=3),
    Action.scroll(112, 84, right=-2),
    Action.wait(2.0),
    Action.done(),
    Action.fail(),
]


@pytest.mark.parametrize("action_format", ["qwen25vl", "pyautogui"])
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.kind)
def test_a_reply_parses_back_to_its_action(action, action_format):
    if action_format == "pyautogui" and action.kind == "wait":
        action = Action.wait(5.0)  # pyautogui's WAIT lasts 5 s
    _, parsed = demo_reply(action, action_format, SAME)
    assert parsed == action


@pytest.mark.parametrize("action", [a for a in ACTIONS if a.x is not None], ids=lambda a: a.kind)
def test_normalised_points_land_within_a_pixel(action):
    _, parsed = demo_reply(action, "qwen3vl", SAME)
    assert parsed.kind == action.kind
    assert abs(parsed.x - action.x) <= 1 and abs(parsed.y - action.y) <= 1


def test_points_are_written_in_the_resized_image_and_map_back_to_the_screen():
    text, parsed = demo_reply(Action.click(80, 60), "qwen25vl", RESIZED)
    assert '"coordinate": [84, 56]' in text
    assert (parsed.x, parsed.y) == (80, 60)


def test_a_grid_rounds_points_to_its_multiples():
    text = action_text(Action.click(80, 61), "qwen25vl", RESIZED, grid=7)
    assert '"coordinate": [84, 56]' in text
    text = action_text(Action.click(159, 119), "qwen25vl", RESIZED, grid=7)
    assert '"coordinate": [161, 105]' in text  # the last multiple inside the 168x112 image


def test_what_a_format_cannot_say_is_refused_by_name():
    with pytest.raises(UnwritableAction, match="uitars"):
        action_text(Action.click(1, 1), "uitars", SAME)
    with pytest.raises(UnwritableAction, match="pyautogui"):
        action_text(Action.done("42"), "pyautogui", SAME)
    with pytest.raises(UnwritableAction, match="pyautogui"):
        action_text(Action.wait(2.0), "pyautogui", SAME)
    with pytest.raises(ValueError, match="grid"):
        action_text(Action.click(1, 1), "qwen25vl", SAME, grid=0)
