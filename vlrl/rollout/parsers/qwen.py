"""Qwen2.5-VL and Qwen3-VL ``computer_use`` tool calls.

A reply is any preamble (reasoning, an ``Action: ...`` summary, a ``<think>`` block), then one
``<tool_call>{"name": "computer_use", "arguments": {"action": ..., ...}}</tool_call>``; the closing
tag may be missing (a stop string cuts it). Without tags the reply must be that JSON object alone,
optionally in a code fence. Qwen2.5-VL writes points in pixels of the resized image, Qwen3-VL on
a 0..999 grid.

``pixels`` of ``scroll``/``hscroll`` counts wheel notches, because the reference executors (Qwen's
cookbook, OSWorld) pass it straight to ``pyautogui.scroll``: positive scrolls up (``hscroll``:
right), at ``coordinate`` or else the screen centre. A drag names both ends, as
``start_coordinate`` + ``coordinate`` (or ``end_coordinate``) or as ``coordinate`` +
``coordinate2``: the parser cannot know where the pointer is.
"""

from __future__ import annotations

import json
from typing import NoReturn

from vlrl.harness import Action
from vlrl.rollout.parsers.base import DEFAULT_WAIT_S, ParseError, Parser, ScreenMap, brief, unfence
from vlrl.rollout.parsers.keys import key_combo

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_SHAPE = '<tool_call>{"name": "computer_use", "arguments": {"action": ..., ...}}</tool_call>'
_POINT_KINDS = {
    "left_click": "click",
    "double_click": "double_click",
    "right_click": "right_click",
    "mouse_move": "move",
}
_DRAG_ENDS = (("start_coordinate", "coordinate"), ("start_coordinate", "end_coordinate"), ("coordinate", "coordinate2"))
_ARGS: dict[str, frozenset[str]] = {
    # action -> the arguments it may take besides "action"
    **{name: frozenset({"coordinate"}) for name in _POINT_KINDS},
    "left_click_drag": frozenset({"start_coordinate", "end_coordinate", "coordinate", "coordinate2"}),
    "type": frozenset({"text"}),
    "key": frozenset({"keys"}),
    "scroll": frozenset({"pixels", "coordinate"}),
    "hscroll": frozenset({"pixels", "coordinate"}),
    "wait": frozenset({"time"}),
    "terminate": frozenset({"status"}),
    "answer": frozenset({"text"}),
}
_MAX_WAIT_GUARD = 1e6
"""Bound checked before a wait time becomes a float (the Action then applies its own limit)."""


class QwenParser(Parser):
    """``computer_use`` tool calls; ``normalised`` selects Qwen3-VL's 0..999 points."""

    def __init__(self, *, normalised: bool) -> None:
        self.normalised = normalised

    def describe(self) -> str:
        points = "on a 0-999 grid over the screenshot" if self.normalised else "in pixels of the screenshot"
        return (
            f"One tool call: {_SHAPE}. Actions and arguments: left_click, double_click, right_click, "
            "mouse_move {coordinate: [x, y]}; left_click_drag {start_coordinate: [x, y], coordinate: [x, y]}; "
            'type {text}; key {keys: ["ctrl", "c"]}; scroll, hscroll {pixels: wheel notches, positive = up '
            '(hscroll: right), optional coordinate}; wait {time: seconds}; terminate {status: "success" or '
            f'"failure"}}; answer {{text}}. Coordinates are {points}.'
        )

    def _parse(self, text: str, screen: ScreenMap) -> Action:
        call = _load(_tool_call_json(text))
        if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
            raise ParseError(f"tool call must be a JSON object with exactly 'name' and 'arguments'; expected {_SHAPE}")
        if call["name"] != "computer_use":
            raise ParseError(f"unknown tool {brief(call['name'])}; expected 'computer_use'")
        args = call["arguments"]
        if isinstance(args, str):  # some chat templates serialise the arguments once more
            args = _load(args)
        if not isinstance(args, dict):
            raise ParseError('\'arguments\' must be a JSON object like {"action": "left_click", "coordinate": [x, y]}')
        return self._action(args, screen)

    def _action(self, args: dict[str, object], screen: ScreenMap) -> Action:
        name = args.get("action")
        if not isinstance(name, str) or name not in _ARGS:
            raise ParseError(f"unknown action {brief(name)}; expected one of {', '.join(_ARGS)}")
        extra = sorted(set(args) - _ARGS[name] - {"action"})
        if extra:
            expected = ", ".join(sorted(_ARGS[name])) or "none"
            raise ParseError(f"{name} got unexpected argument {brief(extra[0])}; expected {expected}")
        if name in _POINT_KINDS:
            x, y = self._point(args, "coordinate", screen)
            return Action(kind=_POINT_KINDS[name], x=x, y=y)
        if name == "left_click_drag":
            ends = [pair for pair in _DRAG_ENDS if set(pair) == set(args) - {"action"}]
            if not ends:
                raise ParseError("left_click_drag needs both ends: start_coordinate [x, y] and coordinate [x, y]")
            (x, y), (to_x, to_y) = (self._point(args, key, screen) for key in ends[0])
            return Action.drag(x, y, to_x, to_y)
        if name == "type":
            return Action.type(_string(args, "text"))
        if name == "key":
            keys = _required(args, "keys")
            if isinstance(keys, str):
                keys = [keys]
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise ParseError(f'keys={brief(keys)}; expected a list of key names like ["ctrl", "c"]')
            return Action.key(*key_combo(keys))
        if name in ("scroll", "hscroll"):
            x, y = self._point(args, "coordinate", screen) if "coordinate" in args else screen.centre()
            notches = _notches(_required(args, "pixels"))
            if name == "scroll":
                return Action.scroll(x, y, down=-notches)
            return Action.scroll(x, y, right=notches)
        if name == "wait":
            seconds = args.get("time", DEFAULT_WAIT_S)
            number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
            if not (number and 0 <= seconds <= _MAX_WAIT_GUARD):
                raise ParseError(f"time={brief(seconds)}; expected a number of seconds")
            return Action.wait(float(seconds))
        if name == "terminate":
            status = _required(args, "status")
            if status not in ("success", "failure"):
                raise ParseError(f'status={brief(status)}; expected "success" or "failure"')
            return Action.done() if status == "success" else Action.fail()
        return Action.done(_string(args, "text"))  # answer

    def _point(self, args: dict[str, object], key: str, screen: ScreenMap) -> tuple[int, int]:
        value = _required(args, key)
        if not (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        ):
            raise ParseError(f"{key}={brief(value)}; expected [x, y] with two numbers")
        return screen.from_normalised(*value) if self.normalised else screen.from_image(*value)


def _tool_call_json(text: str) -> str:
    """The JSON text of the one tool call in the reply (everything up to ``</think>`` is dropped)."""
    text = text.rpartition("</think>")[2]
    count = text.count(_OPEN)
    if count > 1:
        raise ParseError(f"found {count} tool calls; expected exactly one {_OPEN}...{_CLOSE}")
    if count == 0:
        return unfence(text)
    body, closed, rest = text.partition(_OPEN)[2].partition(_CLOSE)
    if closed and rest.strip():
        raise ParseError(f"found text after {_CLOSE}; expected the tool call to end the reply")
    return unfence(body)


def _load(raw: str) -> object:
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except ParseError:
        raise
    except RecursionError:
        raise ParseError(f"tool call JSON is nested too deeply; expected {_SHAPE}") from None
    except json.JSONDecodeError as err:
        where = f"{err.msg} at character {err.pos} of the JSON"
        raise ParseError(f"tool call is not valid JSON ({where}); expected {_SHAPE}") from None
    except ValueError:  # an integer literal too long to convert
        raise ParseError("a number in the tool call has too many digits; expected pixel coordinates") from None


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise ParseError(f"JSON key {brief(key)} appears twice; expected each argument once")
        seen[key] = value
    return seen


def _no_constant(name: str) -> NoReturn:
    raise ParseError(f"{name} is not a valid number here; expected a finite number")


def _required(args: dict[str, object], key: str) -> object:
    if key not in args:
        raise ParseError(f"{args['action']} is missing {key!r}")
    return args[key]


def _string(args: dict[str, object], key: str) -> str:
    value = _required(args, key)
    if not isinstance(value, str):
        raise ParseError(f"{key}={brief(value)}; expected a string")
    return value


def _notches(pixels: object) -> int:
    """Whole wheel notches from ``pixels`` (a float must be integral: 3.0 is fine, 2.5 is not)."""
    if isinstance(pixels, float) and pixels.is_integer():
        return int(pixels)
    if isinstance(pixels, bool) or not isinstance(pixels, int):
        raise ParseError(f"pixels={brief(pixels)}; expected a whole number of wheel notches (positive scrolls up)")
    return pixels
