"""UI-TARS-1.5 replies: an optional ``Thought: ...`` (or any preamble), then ``Action: call(...)``.

Points are absolute pixels of the resized image, written either the UI-TARS-1.5 way
(``point='<point>x y</point>'``) or the earlier way (``start_box='<|box_start|>(x,y)<|box_end|>'``);
a four-number box stands for its centre. ``scroll`` moves ``SCROLL_NOTCHES`` wheel notches at
its point (the screen centre without one), as OSWorld's UI-TARS runner does; ``wait()`` sleeps
5 s as the UI-TARS prompt documents. Like UI-TARS's own parser, ``left_single`` is read as
``click``, ``hover`` as a move and ``press(key=...)`` as ``hotkey``.
"""

from __future__ import annotations

import re

from vlrl.harness import Action
from vlrl.rollout.parsers.base import DEFAULT_WAIT_S, ParseError, Parser, ScreenMap, brief, unfence
from vlrl.rollout.parsers.calls import Call, Value, read_calls
from vlrl.rollout.parsers.keys import key_combo

SCROLL_NOTCHES = 5

_ACTION_LINE = re.compile(r"^[ \t]*Action[ \t]*:", re.MULTILINE)
_TRAILING_FENCE = re.compile(r"\n[ \t]*```[ \t]*$")
_WRAPPERS = (("<|box_start|>", "<|box_end|>"), ("<point>", "</point>"), ("<bbox>", "</bbox>"))
_NUMBER = re.compile(r"-?(?:[0-9]{1,12}(?:\.[0-9]{0,8})?|\.[0-9]{1,8})")
_SEPARATOR = re.compile(r"\s*,\s*|\s+")
_DIRECTIONS = {
    # direction -> (notches right, notches down)
    "down": (0, SCROLL_NOTCHES),
    "up": (0, -SCROLL_NOTCHES),
    "right": (SCROLL_NOTCHES, 0),
    "left": (-SCROLL_NOTCHES, 0),
}

_POINT = ("point", "start_box")
_START = ("start_point", "start_box")
_END = ("end_point", "end_box")
_ARGS: dict[str, tuple[tuple[str, ...], ...]] = {
    # action -> its arguments, each as the names it may be written under (required unless noted)
    "click": (_POINT,),
    "left_single": (_POINT,),
    "hover": (_POINT,),
    "left_double": (_POINT,),
    "right_single": (_POINT,),
    "drag": (_START, _END),
    "hotkey": (("key",),),
    "press": (("key",),),
    "type": (("content",),),
    "scroll": (_POINT, ("direction",)),
    "wait": (),
    "finished": (("content",),),
    "call_user": (),
}
_OPTIONAL = {("scroll", _POINT), ("finished", ("content",))}
_POINT_KINDS = {
    "click": "click",
    "left_single": "click",
    "left_double": "double_click",
    "right_single": "right_click",
    "hover": "move",
}


class UITarsParser(Parser):
    """UI-TARS-1.5 ``Thought: ... / Action: ...`` replies; one action per reply."""

    def describe(self) -> str:
        return (
            "Optional 'Thought: ...', then one line 'Action: <call>' with <call> one of: "
            "click(point='<point>x y</point>'), left_double(point=...), right_single(point=...), "
            "drag(start_point='<point>x1 y1</point>', end_point='<point>x2 y2</point>'), "
            "hotkey(key='ctrl c'), type(content='text'), "
            "scroll(point='<point>x y</point>', direction='down|up|left|right'), wait(), "
            "finished(content='answer'), call_user(). Points are pixels of the screenshot; "
            "in strings escape \\' \\\" and \\n."
        )

    def _parse(self, text: str, screen: ScreenMap) -> Action:
        heads = list(_ACTION_LINE.finditer(text))
        if heads:
            calls = read_calls(_TRAILING_FENCE.sub("", text[heads[-1].end() :].rstrip()))
        else:
            try:
                calls = read_calls(unfence(text))
            except ParseError as err:
                feedback = f"no 'Action: <call>' line, and the reply is not a bare call: {err.feedback}"
                raise ParseError(feedback) from None
        if len(calls) != 1:
            raise ParseError(f"found {len(calls)} actions; expected exactly one line 'Action: <call>'")
        return _action(calls[0], screen)


def _action(call: Call, screen: ScreenMap) -> Action:
    if call.name not in _ARGS:
        raise ParseError(f"unknown action {brief(call.name)}; expected one of {', '.join(_ARGS)}")
    args = _bind(call)
    if call.name in _POINT_KINDS:
        x, y = _point(args["point"], screen)
        return Action(kind=_POINT_KINDS[call.name], x=x, y=y)
    if call.name == "drag":
        (x, y), (to_x, to_y) = _point(args["start_point"], screen), _point(args["end_point"], screen)
        return Action.drag(x, y, to_x, to_y)
    if call.name in ("hotkey", "press"):
        return Action.key(*key_combo(_string(args, "key").split()))
    if call.name == "type":
        return Action.type(_string(args, "content"))
    if call.name == "scroll":
        direction = _string(args, "direction").strip().lower()
        if direction not in _DIRECTIONS:
            expected = ", ".join(_DIRECTIONS)
            raise ParseError(f"scroll direction {brief(direction)} is unknown; expected one of {expected}")
        x, y = _point(args["point"], screen) if "point" in args else screen.centre()
        right, down = _DIRECTIONS[direction]
        return Action.scroll(x, y, down=down, right=right)
    if call.name == "wait":
        return Action.wait(DEFAULT_WAIT_S)
    if call.name == "finished":
        answer = _string(args, "content") if "content" in args else ""
        return Action.done(answer or None)
    return Action.fail()  # call_user: the model gives up and asks for a human


def _bind(call: Call) -> dict[str, Value]:
    """Map the call's keyword arguments onto the first spelling of each parameter."""
    if call.args:
        raise ParseError(f"{call.name}() takes keyword arguments only, e.g. {call.name}(point='<point>x y</point>')")
    bound: dict[str, Value] = {}
    unused = dict(call.kwargs)
    for names in _ARGS[call.name]:
        given = [name for name in names if name in unused]
        if len(given) > 1:
            raise ParseError(f"{call.name}() got both {given[0]!r} and {given[1]!r}; expected one")
        if given:
            bound[names[0]] = unused.pop(given[0])
        elif (call.name, names) not in _OPTIONAL:
            raise ParseError(f"{call.name}() is missing {names[0]!r}")
    if unused:
        expected = ", ".join(names[0] for names in _ARGS[call.name]) or "no arguments"
        raise ParseError(f"{call.name}() got unexpected argument {brief(next(iter(unused)))}; expected {expected}")
    return bound


def _string(args: dict[str, Value], name: str) -> str:
    value = args[name]
    if not isinstance(value, str):
        raise ParseError(f"{name}={brief(value)}; expected a quoted string")
    return value


def _point(value: Value, screen: ScreenMap) -> tuple[int, int]:
    """Read '<point>x y</point>', '<|box_start|>(x,y)<|box_end|>', '(x,y)' or a 4-number box (its centre)."""
    if not isinstance(value, str):
        raise ParseError(f"point {brief(value)}; expected a string like '<point>x y</point>'")
    inner = value.strip()
    for opening, closing in _WRAPPERS:
        if inner.startswith(opening) and inner.endswith(closing):
            inner = inner[len(opening) : -len(closing)].strip()
            break
    if inner[:1] + inner[-1:] in ("()", "[]"):
        inner = inner[1:-1].strip()
    parts = _SEPARATOR.split(inner)
    if len(parts) not in (2, 4) or not all(_NUMBER.fullmatch(p) for p in parts):
        raise ParseError(
            f"point {brief(value)} is malformed; expected '<point>x y</point>' with x, y pixels of the screenshot"
        )
    numbers = [float(p) for p in parts]
    if len(numbers) == 4:
        numbers = [(numbers[0] + numbers[2]) / 2, (numbers[1] + numbers[3]) / 2]
    return screen.from_image(numbers[0], numbers[1])
