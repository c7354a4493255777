"""The pyautogui subset: literal-only calls in pixels of the resized image, plus OSWorld sentinels."""

from __future__ import annotations

import pytest

from vlrl.harness import Action
from vlrl.rollout.parsers import ParseError, ScreenMap, parse_action

SCREEN = ScreenMap(1280, 720, 640, 360)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pyautogui.click(100, 50)", Action.click(200, 100)),
        ("pyautogui.click(x=100, y=50)", Action.click(200, 100)),
        ("pyautogui.click(100, y=50.4)", Action.click(200, 101)),
        ("pyautogui.click(100, 50, duration=0.5)", Action.click(200, 100)),
        ("pyautogui.doubleClick(10, 20)", Action.double_click(20, 40)),
        ("pyautogui.rightClick(10, 20)", Action.right_click(20, 40)),
        ("pyautogui.moveTo(10, 20)", Action.move(20, 40)),
        ("pyautogui.moveTo(10, 20); pyautogui.dragTo(30, 40)", Action.drag(20, 40, 60, 80)),
        ("pyautogui.moveTo(10, 20)\npyautogui.dragTo(30, 40, duration=1)", Action.drag(20, 40, 60, 80)),
        ("pyautogui.write('hello')", Action.type("hello")),
        ("pyautogui.write('Dear Bob,\nfrom Alice')", Action.type("Dear Bob,\nfrom Alice")),
        ("pyautogui.typewrite('it\\'s\\n', interval=0.05)", Action.type("it's\n")),
        ('pyautogui.write("a \\"b\\"")', Action.type('a "b"')),
        ("pyautogui.press('enter')", Action.key("enter")),
        ("pyautogui.press('Return')", Action.key("enter")),
        ("pyautogui.press('a')", Action.key("a")),
        ("pyautogui.hotkey('ctrl', 'c')", Action.key("ctrl", "c")),
        ("pyautogui.hotkey('command', 'shift', 'z')", Action.key("meta", "shift", "z")),
        ("pyautogui.scroll(-3)", Action.scroll(640, 360, down=3)),
        ("pyautogui.scroll(5, x=100, y=50)", Action.scroll(200, 100, down=-5)),
        ("pyautogui.scroll(5, 100, 50)", Action.scroll(200, 100, down=-5)),
        ("pyautogui.hscroll(-2, x=100, y=50)", Action.scroll(200, 100, right=-2)),
        ("DONE", Action.done()),
        ("FAIL", Action.fail()),
        ("WAIT", Action.wait(5.0)),
        # natural variants: fences with prose, comments, blank lines, spacing
        ("```DONE```", Action.done()),
        ("```\nFAIL\n```", Action.fail()),
        ("I will click OK.\n```python\npyautogui.click(100, 50)\n```", Action.click(200, 100)),
        ("\n  pyautogui.click( 100 ,50 )  # the OK button\n\n", Action.click(200, 100)),
        ("pyautogui.click(\n    x=100,\n    y=50,\n)", Action.click(200, 100)),
    ],
)
def test_pyautogui_calls(text, expected):
    assert parse_action(text, "pyautogui", SCREEN) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "found 0 calls; expected exactly one action"),
        ("done", "expected '\\(' after 'done'"),
        ("pyautogui.click(1, 2); pyautogui.click(3, 4)", "found 2 calls; expected exactly one action"),
        ("pyautogui.dragTo(30, 40)", "dragTo needs its start"),
        ("pyautogui.dragTo(1, 2); pyautogui.moveTo(3, 4)", "found 2 calls"),
        ("pyautogui.tripleClick(1, 2)", "'pyautogui.tripleClick' is not allowed; expected pyautogui.<function>"),
        ("click(1, 2)", "'click' is not allowed"),
        ("os.system('touch /tmp/x')", "'os.system' is not allowed"),
        ("pyautogui.os.system('ls')", "'pyautogui.os.system' is not allowed"),
        ("import pyautogui\npyautogui.click(1, 2)", "imports are not allowed"),
        ("from os import system", "imports are not allowed"),
        (
            "pyautogui.click(eval('1'), 2)",
            "expected a number or a quoted string for argument 1 of 'pyautogui.click' at position 16; found 'eval'",
        ),
        ("pyautogui.click(__import__('os').system('ls'), 2)", "found '__import__'"),
        ("pyautogui.click(1 + 2, 3)", "unexpected character '\\+'|expected ',' or"),
        ("pyautogui.click(x, y)", "found 'x'"),
        ("pyautogui.click([1, 2])", "unexpected character '\\['"),
        ("pyautogui.click(lambda: 0)", "unexpected character ':' at position 22"),
        ("pyautogui.write(f'{x}')", "found 'f'"),
        ("pyautogui.click(1)", "pyautogui.click\\(\\) is missing 'y'"),
        ("pyautogui.click(1, 2, 3, 4)", "takes at most 3 arguments \\(x, y, duration\\); got 4"),
        ("pyautogui.click(1, 2, button='right')", "unexpected argument 'button'; expected x, y, duration"),
        ("pyautogui.click(1, 2, x=3)", "got 'x' twice"),
        ("pyautogui.click(x=1, x=2, y=3)", "got 'x' twice"),
        ("pyautogui.click(x=1, 2)", "follows a keyword argument"),
        ("pyautogui.click('1', 2)", "x='1'; expected a number"),
        ("pyautogui.click(1, 2, duration='slow')", "duration='slow'; expected a number"),
        ("pyautogui.click(700, 2)", r"point \(700, 2\) is outside the 640x360 screenshot"),
        ("pyautogui.click(-1, 2)", "outside the 640x360 screenshot"),
        ("pyautogui.click(" + "9" * 30 + ", 2)", "number at position 16 has 30 characters; expected at most 20"),
        ("pyautogui.click(1e5, 2)", "expected ',' or '\\)'"),
        ("pyautogui.write(5)", "message=5; expected a quoted string"),
        ("pyautogui.write('')", "type action: text=''"),
        ("pyautogui.write('\x07')", "control characters"),
        ("pyautogui.write('abc", "string starting at position 16 is not closed"),
        ("pyautogui.press('boom')", "unknown key 'boom'"),
        ("pyautogui.hotkey()", "hotkey takes key names only"),
        ("pyautogui.hotkey('ctrl', 3)", "hotkey takes key names only"),
        ("pyautogui.hotkey('ctrl', 'c', interval=0.1)", "hotkey takes key names only"),
        ("pyautogui.scroll(-2.5)", "clicks=-2.5; expected a whole number of wheel notches"),
        ("pyautogui.scroll(0)", "expected a non-zero amount"),
        ("pyautogui.scroll(-100)", "at most 50"),
        ("pyautogui.scroll(-3, x=5)", "scroll needs both x and y, or neither"),
        ("```\nDONE\n```\n```\nFAIL\n```", "found 2 code blocks"),
    ],
)
def test_malformed_pyautogui_replies_are_refused_with_feedback(text, message):
    with pytest.raises(ParseError, match=message):
        parse_action(text, "pyautogui", SCREEN)
