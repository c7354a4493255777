"""A strict subset of pyautogui, as OSWorld-style agents write it.

A reply is one ``pyautogui.<function>(...)`` call, or ``moveTo`` then ``dragTo`` (the only way to
name where a drag starts), in pixels of the resized image; or one of OSWorld's sentinels ``DONE``,
``FAIL``, ``WAIT``. It may sit in one code fence with prose around it, and two calls are separated
by a newline or ';'. Arguments are number and string literals read by ``calls.read_calls``: no
name, attribute, nested call, import or expression is accepted, so nothing in the reply runs.
``duration`` and ``interval`` are accepted and ignored: the harness acts instantly. A scroll
without ``x``/``y`` happens at the screen centre.
"""

from __future__ import annotations

import re

from vlrl.harness import Action
from vlrl.rollout.parsers.base import DEFAULT_WAIT_S, ParseError, Parser, ScreenMap, brief, unfence
from vlrl.rollout.parsers.calls import Call, Value, read_calls
from vlrl.rollout.parsers.keys import key_combo, normalise_key

_PREFIX = "pyautogui."
_POINTER = (("x", "y", "duration"), frozenset({"duration"}))
_SIGNATURES: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    # function -> (parameters in positional order, the optional ones); hotkey takes keys only
    "click": _POINTER,
    "doubleClick": _POINTER,
    "rightClick": _POINTER,
    "moveTo": _POINTER,
    "dragTo": _POINTER,
    "write": (("message", "interval"), frozenset({"interval"})),
    "typewrite": (("message", "interval"), frozenset({"interval"})),
    "press": (("keys",), frozenset()),
    "hotkey": ((), frozenset()),
    "scroll": (("clicks", "x", "y"), frozenset({"x", "y"})),
    "hscroll": (("clicks", "x", "y"), frozenset({"x", "y"})),
}
_POINT_KINDS = {"click": "click", "doubleClick": "double_click", "rightClick": "right_click", "moveTo": "move"}
_SENTINELS = {"DONE": Action.done, "FAIL": Action.fail, "WAIT": lambda: Action.wait(DEFAULT_WAIT_S)}
_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]", re.MULTILINE)


class PyAutoGUIParser(Parser):
    """One pyautogui call (or moveTo; dragTo) with literal arguments, or DONE / FAIL / WAIT."""

    def describe(self) -> str:
        return (
            "One pyautogui call with number or quoted-string arguments, in pixels of the screenshot: "
            "pyautogui.click(x, y), doubleClick(x, y), rightClick(x, y), moveTo(x, y), "
            "moveTo(x1, y1); dragTo(x2, y2), write('text'), press('enter'), hotkey('ctrl', 'c'), "
            "scroll(clicks, x=x, y=y) (positive scrolls up), hscroll(clicks, x=x, y=y) (positive scrolls right). "
            "Or exactly DONE, FAIL or WAIT."
        )

    def _parse(self, text: str, screen: ScreenMap) -> Action:
        body = unfence(text).strip()
        if body in _SENTINELS:
            return _SENTINELS[body]()
        try:
            calls = read_calls(body)
        except ParseError:
            if _IMPORT.search(body):  # say why the usual first line of a script is refused
                raise ParseError("imports are not allowed; write only pyautogui.<function>(...) calls") from None
            raise
        functions = [_function(call) for call in calls]
        if functions == ["moveTo", "dragTo"]:
            (x, y), (to_x, to_y) = (_point(call, screen) for call in calls)
            return Action.drag(x, y, to_x, to_y)
        if len(calls) != 1:
            raise ParseError(
                f"found {len(calls)} calls; expected exactly one action "
                "(or pyautogui.moveTo(x1, y1); pyautogui.dragTo(x2, y2))"
            )
        return _action(calls[0], functions[0], screen)


def _function(call: Call) -> str:
    function = call.name.removeprefix(_PREFIX)
    if not call.name.startswith(_PREFIX) or function not in _SIGNATURES:
        raise ParseError(
            f"{brief(call.name)} is not allowed; expected pyautogui.<function> with function one of "
            f"{', '.join(_SIGNATURES)}"
        )
    return function


def _action(call: Call, function: str, screen: ScreenMap) -> Action:
    if function in _POINT_KINDS:
        x, y = _point(call, screen)
        return Action(kind=_POINT_KINDS[function], x=x, y=y)
    if function == "dragTo":
        raise ParseError("dragTo needs its start: write pyautogui.moveTo(x1, y1); pyautogui.dragTo(x2, y2)")
    if function == "hotkey":
        if call.kwargs or not call.args or not all(isinstance(key, str) for key in call.args):
            raise ParseError("hotkey takes key names only, e.g. pyautogui.hotkey('ctrl', 'c')")
        return Action.key(*key_combo(call.args))
    args = _bind(call, function)
    if function in ("write", "typewrite"):
        return Action.type(_string(args, "message"))
    if function == "press":
        return Action.key(normalise_key(_string(args, "keys")))
    clicks = args["clicks"]  # scroll, hscroll
    if not isinstance(clicks, int):
        raise ParseError(f"clicks={brief(clicks)}; expected a whole number of wheel notches")
    if ("x" in args) != ("y" in args):
        raise ParseError(f"{function} needs both x and y, or neither")
    x, y = screen.from_image(_number(args, "x"), _number(args, "y")) if "x" in args else screen.centre()
    if function == "scroll":
        return Action.scroll(x, y, down=-clicks)
    return Action.scroll(x, y, right=clicks)


def _point(call: Call, screen: ScreenMap) -> tuple[int, int]:
    args = _bind(call, call.name.removeprefix(_PREFIX))
    return screen.from_image(_number(args, "x"), _number(args, "y"))


def _bind(call: Call, function: str) -> dict[str, Value]:
    """Match arguments to parameters as Python would, and check the ignored ones are numbers."""
    params, optional = _SIGNATURES[function]
    if len(call.args) > len(params):
        raise ParseError(
            f"{call.name}() takes at most {len(params)} arguments ({', '.join(params)}); got {len(call.args)}"
        )
    args = dict(zip(params, call.args))
    for key, value in call.kwargs.items():
        if key not in params:
            raise ParseError(f"{call.name}() got unexpected argument {brief(key)}; expected {', '.join(params)}")
        if key in args:
            raise ParseError(f"{call.name}() got {key!r} twice")
        args[key] = value
    missing = [p for p in params if p not in args and p not in optional]
    if missing:
        raise ParseError(f"{call.name}() is missing {missing[0]!r}")
    for ignored in ("duration", "interval"):
        if ignored in args:
            _number(args, ignored)
    return args


def _number(args: dict[str, Value], name: str) -> float:
    value = args[name]
    if isinstance(value, str):
        raise ParseError(f"{name}={brief(value)}; expected a number")
    return value


def _string(args: dict[str, Value], name: str) -> str:
    value = args[name]
    if not isinstance(value, str):
        raise ParseError(f"{name}={brief(value)}; expected a quoted string")
    return value
