"""UI-TARS-1.5 ``Thought: ... / Action: ...`` replies, points in pixels of the resized image."""

from __future__ import annotations

import pytest

from vlrl.harness import Action
from vlrl.rollout.parsers import ParseError, ScreenMap, parse_action

SCREEN = ScreenMap(1280, 720, 640, 360)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Thought: The OK button is at the bottom.\nAction: click(point='<point>100 50</point>')",
            Action.click(200, 100),
        ),
        ("Action: click(start_box='<|box_start|>(100,50)<|box_end|>')", Action.click(200, 100)),
        ("Action: click(start_box='(100, 50)')", Action.click(200, 100)),
        ("Action: click(start_box='<|box_start|>(90,40,110,60)<|box_end|>')", Action.click(200, 100)),
        ("Action: click(point='<point>100.5 50</point>')", Action.click(201, 100)),
        ("Action: left_single(point='<point>10 20</point>')", Action.click(20, 40)),
        ("Action: left_double(point='<point>10 20</point>')", Action.double_click(20, 40)),
        ("Action: hover(point='<point>10 20</point>')", Action.move(20, 40)),
        ("Action: right_single(point='<point>10 20</point>')", Action.right_click(20, 40)),
        (
            "Action: drag(start_point='<point>10 20</point>', end_point='<point>30 40</point>')",
            Action.drag(20, 40, 60, 80),
        ),
        (
            "Action: drag(start_box='<|box_start|>(10,20)<|box_end|>', end_box='<|box_start|>(30,40)<|box_end|>')",
            Action.drag(20, 40, 60, 80),
        ),
        ("Action: hotkey(key='ctrl c')", Action.key("ctrl", "c")),
        ("Action: hotkey(key='Ctrl+Shift+T')", Action.key("ctrl", "shift", "T")),
        ("Action: hotkey(key='enter')", Action.key("enter")),
        ("Action: press(key='esc')", Action.key("escape")),
        ("Action: type(content='hello world\\n')", Action.type("hello world\n")),
        ("Action: type(content='It\\'s \"quoted\"')", Action.type('It\'s "quoted"')),
        ('Action: type(content="a \\\\ b")', Action.type("a \\ b")),
        ("Action: scroll(point='<point>100 50</point>', direction='down')", Action.scroll(200, 100, down=5)),
        ("Action: scroll(point='<point>100 50</point>', direction='up')", Action.scroll(200, 100, down=-5)),
        ("Action: scroll(direction='right', point='<point>100 50</point>')", Action.scroll(200, 100, right=5)),
        ("Action: scroll(direction='left')", Action.scroll(640, 360, right=-5)),
        ("Action: wait()", Action.wait(5.0)),
        ("Action: finished(content='The answer is 42.')", Action.done("The answer is 42.")),
        ("Action: finished()", Action.done()),
        ("Action: finished(content='')", Action.done()),
        ("Action: call_user()", Action.fail()),
        # natural variants: spacing, code fences, a reflection, a bare call, a call over lines
        ("  Thought: x\n\nAction:click(point='<point>1 2</point>')  \n", Action.click(2, 4)),
        ("```\nThought: x\nAction: click(point='<point>1 2</point>')\n```", Action.click(2, 4)),
        (
            "Reflection: that failed.\nAction_Summary: retry\nAction: click(point='<point>1 2</point>')",
            Action.click(2, 4),
        ),
        ("Thought: plan.\nAction: I think so\nAction: click(point='<point>1 2</point>')", Action.click(2, 4)),
        ("click(point='<point>1 2</point>')", Action.click(2, 4)),
        (
            "Action: drag(\n  start_point='<point>1 2</point>',\n  end_point='<point>3 4</point>',\n)",
            Action.drag(2, 4, 6, 8),
        ),
    ],
)
def test_uitars_actions(text, expected):
    assert parse_action(text, "uitars", SCREEN) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "Thought: I should click.",
            "no 'Action: <call>' line, and the reply is not a bare call: unexpected character ':'",
        ),
        (
            "Action: tap(point='<point>1 2</point>')",
            "unknown action 'tap'; expected one of click, left_single, hover, left_double",
        ),
        (
            "Action: click(point='<point>1 2</point>')\n\nclick(point='<point>3 4</point>')",
            "found 2 actions; expected exactly one",
        ),
        ("Action: ", "found 0 actions"),
        ("Action: click('<point>1 2</point>')", "click\\(\\) takes keyword arguments only"),
        ("Action: click()", "click\\(\\) is missing 'point'"),
        ("Action: click(point='<point>1 2</point>', start_box='(1,2)')", "got both 'point' and 'start_box'"),
        ("Action: click(point='<point>1 2</point>', button='left')", "unexpected argument 'button'; expected point"),
        ("Action: wait(seconds=3)", "unexpected argument 'seconds'; expected no arguments"),
        ("Action: click(point=5)", "point 5; expected a string like '<point>x y</point>'"),
        ("Action: click(point='<point>1</point>')", "is malformed; expected '<point>x y</point>'"),
        ("Action: click(point='<point>1 2 3</point>')", "is malformed"),
        ("Action: click(point='<point>a b</point>')", "is malformed"),
        ("Action: click(point='<point>1e9 2</point>')", "is malformed"),
        ("Action: click(point='<point>nan 2</point>')", "is malformed"),
        ("Action: click(point='<point>700 2</point>')", r"point \(700.0, 2.0\) is outside the 640x360 screenshot"),
        ("Action: click(point='<point>-5 2</point>')", "outside the 640x360 screenshot"),
        ("Action: click(point='<point>1 2</point>'", "expected ',' or '\\)' in the arguments of 'click'"),
        ("Action: click(point='<point>1 2</point>)", "string starting at position 13 is not closed"),
        ("Action: type(content='It's')", r"expected a closing ' \(write a quote inside a string as \\'\)"),
        ("Action: type(content='a\\x41')", r"unsupported escape '\\\\x' in a string"),
        ("Action: type(content='')", "type action: text=''; expected a non-empty string"),
        ("Action: type(content=5)", "content=5; expected a quoted string"),
        ("Action: hotkey(key='ctrl boom')", "unknown key 'boom'"),
        ("Action: hotkey(key='a b c d e')", "expected a tuple of 1 to 4 key names"),
        ("Action: scroll(point='<point>1 2</point>', direction='sideways')", "scroll direction 'sideways' is unknown"),
        ("Action: scroll(point='<point>1 2</point>')", "scroll\\(\\) is missing 'direction'"),
        ("Action: click(point=click(point='<point>1 2</point>'))", "expected a number or a quoted string"),
        ("Action: __import__('os').system('touch /tmp/x')", "expected a new line or ';' after the call"),
        ("Action: eval('1+1')", "unknown action 'eval'"),
        ("Action: click(point=f'<point>1 2</point>')", "expected a number or a quoted string"),
    ],
)
def test_malformed_uitars_replies_are_refused_with_feedback(text, message):
    with pytest.raises(ParseError, match=message):
        parse_action(text, "uitars", SCREEN)
