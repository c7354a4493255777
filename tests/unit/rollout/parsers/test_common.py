"""What all formats share: screen mapping, key names, fences, size limits, the registry."""

from __future__ import annotations

import pytest

from vlrl.harness import Action
from vlrl.rollout.parsers import MAX_OUTPUT_CHARS, PARSERS, ParseError, ScreenMap, parse_action
from vlrl.rollout.parsers.base import unfence
from vlrl.rollout.parsers.keys import key_combo, normalise_key

HALF = ScreenMap(1280, 720, 640, 360)
"""A 1280x720 screen shown to the model at half size: image points double."""
SMART = ScreenMap(1280, 720, 1288, 728)
"""The same screen after Qwen2-VL smart resize (multiples of 28)."""


@pytest.mark.parametrize(
    ("screen", "point", "expected"),
    [
        (HALF, (0, 0), (0, 0)),
        (HALF, (100, 50), (200, 100)),
        (HALF, (100.4, 50.2), (201, 100)),
        (HALF, (639, 359), (1278, 718)),
        (HALF, (640, 360), (1279, 719)),  # the far edge clamps onto the last pixel
        (HALF, (672, 378), (1279, 719)),  # 5% overshoot still clamps
        (SMART, (644, 364), (640, 360)),
        (SMART, (1287, 727), (1279, 719)),
    ],
)
def test_image_points_map_to_screen_pixels(screen, point, expected):
    assert screen.from_image(*point) == expected


@pytest.mark.parametrize(
    ("point", "expected"),
    [((0, 0), (0, 0)), ((999, 999), (1279, 719)), ((500, 500), (640, 360)), ((499.5, 0), (640, 0))],
)
def test_normalised_points_span_the_screen(point, expected):
    assert HALF.from_normalised(*point) == expected


@pytest.mark.parametrize(
    "point", [(-1, 0), (0, -0.5), (673, 0), (0, 379), (float("nan"), 0), (0, float("inf")), (10**400, 0)]
)
def test_image_points_far_off_the_image_are_refused(point):
    with pytest.raises(ParseError, match=r"outside the 640x360 screenshot; expected 0 <= x < 640 and 0 <= y < 360"):
        HALF.from_image(*point)


@pytest.mark.parametrize("point", [(-1, 0), (1000, 0), (0, 999.5), (float("nan"), 0)])
def test_normalised_points_off_the_grid_are_refused(point):
    with pytest.raises(ParseError, match=r"off the normalised grid; expected 0 <= x <= 999"):
        HALF.from_normalised(*point)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((0, 720, 640, 360), "screen_width=0"),
        ((1280, 720, 640.0, 360), "image_width=640.0"),
        ((1280, True, 1, 1), "screen_height=True"),
    ],
)
def test_screen_map_fields_are_checked(fields, message):
    with pytest.raises(ValueError, match=f"ScreenMap.{message}; expected a positive int"):
        ScreenMap(*fields)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Return", "enter"),
        ("enter", "enter"),
        ("ctrl", "ctrl"),
        ("Control", "ctrl"),
        ("ctrlleft", "ctrl"),
        ("cmd", "meta"),
        ("command", "meta"),
        ("win", "meta"),
        ("super", "meta"),
        ("esc", "escape"),
        ("pgdn", "pagedown"),
        ("Page_Down", "pagedown"),
        ("ArrowUp", "up"),
        ("option", "alt"),
        ("F5", "f5"),
        ("BackSpace", "backspace"),
        ("a", "a"),
        ("A", "A"),
        ("+", "+"),
        (" ", "space"),
    ],
)
def test_key_names_map_to_the_harness_spelling(name, key):
    assert normalise_key(name) == key


def test_unknown_keys_are_refused_with_the_known_names():
    with pytest.raises(ParseError, match=r"unknown key 'hyper'; expected a single character or one of .*enter"):
        normalise_key("hyper")


def test_key_combos_split_on_plus():
    assert key_combo(["ctrl+shift+t"]) == ("ctrl", "shift", "t")
    assert key_combo(["ctrl", "+"]) == ("ctrl", "+")
    with pytest.raises(ParseError, match="key combination 'ctrl\\+\\+' is malformed"):
        key_combo(["ctrl++"])


@pytest.mark.parametrize(
    ("text", "body"),
    [
        ("no fence", "no fence"),
        ("```python\ncode()\n```", "code()\n"),
        ("I will click.\n```\ncode()\n```\nDone.", "code()\n"),
        ("```DONE```", "DONE"),
        ("write('```x```')", "write('```x```')"),  # a fence opens only at the start of a line
    ],
)
def test_unfence_returns_the_one_code_block(text, body):
    assert unfence(text) == body


def test_two_code_blocks_are_refused():
    with pytest.raises(ParseError, match="found 2 code blocks; expected one action per reply"):
        unfence("```\na()\n```\n```\nb()\n```")


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_every_format_refuses_oversized_replies_and_describes_itself(fmt):
    with pytest.raises(ParseError, match=f"reply of {MAX_OUTPUT_CHARS + 1} characters is too long"):
        parse_action(" " * (MAX_OUTPUT_CHARS + 1), fmt, HALF)
    assert 50 < len(PARSERS[fmt].describe()) < 1000


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("qwen25vl", '<tool_call>{"name": "computer_use", "arguments": {"action": "wait"}}</tool_call>'),
        ("qwen3vl", '<tool_call>{"name": "computer_use", "arguments": {"action": "wait"}}</tool_call>'),
        ("uitars", "Action: wait()"),
        ("pyautogui", "WAIT"),
    ],
)
def test_parse_action_dispatches_on_the_format(fmt, text):
    assert parse_action(text, fmt, HALF) == Action.wait(5.0)


def test_unknown_formats_are_a_configuration_error():
    with pytest.raises(ValueError, match="action format 'gpt' is unknown; expected one of qwen25vl") as err:
        parse_action("x", "gpt", HALF)
    assert not isinstance(err.value, ParseError)


def test_action_errors_become_parse_errors_with_feedback():
    with pytest.raises(ParseError, match="text of 2001 characters; at most 2000") as err:
        parse_action(f"pyautogui.write('{'a' * 2001}')", "pyautogui", HALF)
    assert err.value.feedback == str(err.value)
