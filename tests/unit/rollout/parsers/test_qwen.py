"""Qwen2.5-VL (image pixels) and Qwen3-VL (0..999 grid) ``computer_use`` tool calls."""

from __future__ import annotations

import json

import pytest

from vlrl.harness import Action
from vlrl.rollout.parsers import ParseError, ScreenMap, parse_action

SCREEN = ScreenMap(1280, 720, 640, 360)


def call(**arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": "computer_use", "arguments": arguments}) + "\n</tool_call>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (call(action="left_click", coordinate=[100, 50]), Action.click(200, 100)),
        (call(action="double_click", coordinate=[100.5, 50]), Action.double_click(201, 100)),
        (call(action="right_click", coordinate=[639, 359]), Action.right_click(1278, 718)),
        (call(action="mouse_move", coordinate=[0, 0]), Action.move(0, 0)),
        (call(action="left_click_drag", start_coordinate=[10, 20], coordinate=[30, 40]), Action.drag(20, 40, 60, 80)),
        (
            call(action="left_click_drag", start_coordinate=[10, 20], end_coordinate=[30, 40]),
            Action.drag(20, 40, 60, 80),
        ),
        (call(action="left_click_drag", coordinate=[10, 20], coordinate2=[30, 40]), Action.drag(20, 40, 60, 80)),
        (call(action="type", text="hello\nworld"), Action.type("hello\nworld")),
        (call(action="key", keys=["ctrl", "c"]), Action.key("ctrl", "c")),
        (call(action="key", keys=["Return"]), Action.key("enter")),
        (call(action="key", keys=["ctrl+shift+t"]), Action.key("ctrl", "shift", "t")),
        (call(action="key", keys="esc"), Action.key("escape")),
        (call(action="scroll", pixels=-5), Action.scroll(640, 360, down=5)),
        (call(action="scroll", pixels=3.0, coordinate=[100, 50]), Action.scroll(200, 100, down=-3)),
        (call(action="hscroll", pixels=2, coordinate=[100, 50]), Action.scroll(200, 100, right=2)),
        (call(action="wait", time=2), Action.wait(2.0)),
        (call(action="wait"), Action.wait(5.0)),
        (call(action="terminate", status="success"), Action.done()),
        (call(action="terminate", status="failure"), Action.fail()),
        (call(action="answer", text="42"), Action.done("42")),
        # natural variants: a preamble, a think block, a cut closing tag, no tags, a fence, spacing
        ("Action: Click the OK button.\n" + call(action="left_click", coordinate=[1, 2]), Action.click(2, 4)),
        ("<think>maybe <tool_call> here</think>\n" + call(action="left_click", coordinate=[1, 2]), Action.click(2, 4)),
        (call(action="left_click", coordinate=[1, 2]).removesuffix("</tool_call>"), Action.click(2, 4)),
        (
            '  {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1, 2]}}\n',
            Action.click(2, 4),
        ),
        (
            '```json\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1, 2]}}\n```',
            Action.click(2, 4),
        ),
        (
            '<tool_call>{"name": "computer_use", '
            '"arguments": "{\\"action\\": \\"left_click\\", \\"coordinate\\": [1, 2]}"}</tool_call>',
            Action.click(2, 4),
        ),
    ],
)
def test_qwen25vl_tool_calls(text, expected):
    assert parse_action(text, "qwen25vl", SCREEN) == expected


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"action": "left_click", "coordinate": [0, 0]}, Action.click(0, 0)),
        ({"action": "left_click", "coordinate": [999, 999]}, Action.click(1279, 719)),
        ({"action": "left_click", "coordinate": [500, 250]}, Action.click(640, 180)),
        (
            {"action": "left_click_drag", "start_coordinate": [0, 0], "coordinate": [999, 500]},
            Action.drag(0, 0, 1279, 360),
        ),
        ({"action": "scroll", "pixels": -3, "coordinate": [500, 500]}, Action.scroll(640, 360, down=3)),
    ],
)
def test_qwen3vl_points_are_normalised(arguments, expected):
    assert parse_action(call(**arguments), "qwen3vl", SCREEN) == expected


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        ("qwen25vl", "I will click the button.", r"not valid JSON \(Expecting value at character 0 of the JSON\)"),
        ("qwen25vl", "<tool_call>{'name': 'computer_use'}</tool_call>", "not valid JSON"),
        ("qwen25vl", call(action="left_click", coordinate=[1, 2]) * 2, "found 2 tool calls; expected exactly one"),
        ("qwen25vl", call(action="left_click", coordinate=[1, 2]) + "\nthen I wait", "found text after </tool_call>"),
        (
            "qwen25vl",
            '<tool_call>{"name": "browser", "arguments": {}}</tool_call>',
            "unknown tool 'browser'; expected 'computer_use'",
        ),
        ("qwen25vl", '<tool_call>{"name": "computer_use"}</tool_call>', "exactly 'name' and 'arguments'"),
        (
            "qwen25vl",
            '<tool_call>{"name": "computer_use", "arguments": [1]}</tool_call>',
            "'arguments' must be a JSON object",
        ),
        (
            "qwen25vl",
            call(action="tap", coordinate=[1, 2]),
            "unknown action 'tap'; expected one of left_click, double_click",
        ),
        ("qwen25vl", call(action="middle_click", coordinate=[1, 2]), "unknown action 'middle_click'"),
        ("qwen25vl", call(coordinate=[1, 2]), "unknown action None"),
        ("qwen25vl", call(action="left_click"), "left_click is missing 'coordinate'"),
        (
            "qwen25vl",
            call(action="left_click", coordinate=[1, 2], text="x"),
            "left_click got unexpected argument 'text'; expected coordinate",
        ),
        (
            "qwen25vl",
            call(action="left_click", coordinate=[1, 2, 3]),
            r"coordinate=\[1, 2, 3\]; expected \[x, y\] with two numbers",
        ),
        ("qwen25vl", call(action="left_click", coordinate=["1", 2]), r"expected \[x, y\] with two numbers"),
        ("qwen25vl", call(action="left_click", coordinate=[True, 2]), r"expected \[x, y\] with two numbers"),
        (
            "qwen25vl",
            call(action="left_click", coordinate=[700, 2]),
            r"point \(700, 2\) is outside the 640x360 screenshot",
        ),
        ("qwen25vl", call(action="left_click", coordinate=[-3, 2]), r"outside the 640x360 screenshot"),
        (
            "qwen25vl",
            '<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [NaN, 1]}}',
            "NaN is not a valid number",
        ),
        (
            "qwen25vl",
            '<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1e999, 1]}}',
            "outside the 640x360",
        ),
        (
            "qwen25vl",
            '{"name": "computer_use", "name": "computer_use", "arguments": {}}',
            "JSON key 'name' appears twice",
        ),
        ("qwen25vl", "<tool_call>" + "[" * 5000, "nested too deeply"),
        ("qwen25vl", '{"a": ' + "9" * 5000 + "}", "a number in the tool call has too many digits"),
        ("qwen25vl", call(action="left_click_drag", coordinate=[1, 2]), "left_click_drag needs both ends"),
        ("qwen25vl", call(action="left_click_drag", start_coordinate=[1, 2], coordinate2=[3, 4]), "needs both ends"),
        ("qwen25vl", call(action="type", text=""), "type action: text=''; expected a non-empty string"),
        ("qwen25vl", call(action="type", text=5), "text=5; expected a string"),
        ("qwen25vl", call(action="type", text="rm\x1b[2J"), "control characters"),
        ("qwen25vl", call(action="key", keys=["ctrl", "boom"]), "unknown key 'boom'"),
        ("qwen25vl", call(action="key", keys=[]), r"keys=\(\); expected a tuple of 1 to 4 key names"),
        ("qwen25vl", call(action="key", keys=[["ctrl"]]), "expected a list of key names"),
        ("qwen25vl", call(action="scroll", pixels=2.5), "pixels=2.5; expected a whole number of wheel notches"),
        (
            "qwen25vl",
            call(action="scroll", pixels=-500),
            r"\(0, 500\) notches; expected a non-zero amount of at most 50",
        ),
        ("qwen25vl", call(action="scroll", pixels=0), "expected a non-zero amount"),
        ("qwen25vl", call(action="scroll"), "scroll is missing 'pixels'"),
        ("qwen25vl", call(action="wait", time=60), "seconds=60.0; expected 0 <= seconds <= 10"),
        ("qwen25vl", call(action="wait", time="soon"), "time='soon'; expected a number of seconds"),
        ("qwen25vl", call(action="wait", time=10**30), "expected a number of seconds"),
        ("qwen25vl", call(action="terminate", status="done"), 'status=\'done\'; expected "success" or "failure"'),
        ("qwen3vl", call(action="left_click", coordinate=[1000, 5]), r"point \(1000, 5\) is off the normalised grid"),
        ("qwen3vl", call(action="left_click", coordinate=[5, -1]), "off the normalised grid"),
    ],
)
def test_malformed_tool_calls_are_refused_with_feedback(fmt, text, message):
    with pytest.raises(ParseError, match=message):
        parse_action(text, fmt, SCREEN)
