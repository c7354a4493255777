"""Typed actions: every malformed action is refused with a message that names the problem."""

from __future__ import annotations

import pytest

from vlrl.harness import Action, ActionError


@pytest.mark.parametrize(
    "action",
    [
        Action.click(0, 0),
        Action.double_click(5, 6),
        Action.right_click(5, 6),
        Action.move(1, 2),
        Action.drag(1, 2, 30, 40),
        Action.scroll(10, 10, down=3),
        Action.scroll(10, 10, right=-2),
        Action.type("hello\nworld"),
        Action.key("ctrl", "a"),
        Action.key("enter"),
        Action.wait(0.5),
        Action.done(),
        Action.done("42"),
        Action.fail("stuck"),
    ],
)
def test_valid_actions_build_and_fit_a_screen(action):
    action.check_bounds(100, 100)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "tap", "x": 1, "y": 1}, "action kind 'tap' is unknown"),
        ({"kind": "click", "x": -1, "y": 2}, r"click action: x=-1; expected a pixel coordinate"),
        ({"kind": "click", "x": 1.5, "y": 2}, r"x=1.5; expected a pixel coordinate"),
        ({"kind": "click", "x": True, "y": 2}, r"x=True; expected a pixel coordinate"),
        ({"kind": "click", "x": 1}, r"y=None; expected a pixel coordinate"),
        ({"kind": "type", "text": "a", "x": 1}, "type action takes no x"),
        ({"kind": "drag", "x": 1, "y": 1, "to_x": 2}, r"drag action: to_y=None"),
        ({"kind": "click", "x": 1, "y": 1, "to_x": 2, "to_y": 3}, "click action takes no to_x"),
        ({"kind": "scroll", "x": 1, "y": 1}, r"scroll action: \(0, 0\) notches; expected a non-zero amount"),
        ({"kind": "scroll", "x": 1, "y": 1, "scroll_y": 99}, "at most 50"),
        ({"kind": "click", "x": 1, "y": 1, "scroll_y": 1}, "click action takes no scroll amount"),
        ({"kind": "type", "text": ""}, "type action: text=''; expected a non-empty string"),
        ({"kind": "type", "text": "a" * 2001}, "text of 2001 characters; at most 2000"),
        ({"kind": "type", "text": "bad\x1b[2J"}, "control characters"),
        ({"kind": "click", "x": 1, "y": 1, "text": "x"}, "click action takes no text"),
        ({"kind": "key", "keys": ()}, "expected a tuple of 1 to 4 key names"),
        ({"kind": "key", "keys": ("ctrl", "explode")}, "key 'explode' is unknown"),
        ({"kind": "key", "keys": ["a"]}, "expected a tuple"),
        ({"kind": "wait", "seconds": 60}, r"seconds=60; expected 0 <= seconds <= 10"),
        ({"kind": "wait", "seconds": float("nan")}, "expected a number"),
        ({"kind": "done", "seconds": 1}, "done action takes no seconds"),
    ],
)
def test_malformed_actions_are_refused(fields, message):
    with pytest.raises(ActionError, match=message):
        Action(**fields)


def test_bounds_are_checked_against_the_screenshot():
    with pytest.raises(ActionError, match=r"click action at \(100, 5\) is outside the 100x80 screenshot"):
        Action.click(100, 5).check_bounds(100, 80)
    with pytest.raises(ActionError, match=r"drag action at \(10, 80\)"):
        Action.drag(1, 1, 10, 80).check_bounds(100, 80)
    Action.drag(0, 0, 99, 79).check_bounds(100, 80)
