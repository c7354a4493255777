"""Actions back to model text: the inverse of the strict parsers, for oracle demonstrations.

A warm start teaches the policy the replies it should write, so an oracle's ``Action`` must be
rendered exactly as the policy's action format expects it, in the coordinates of the image the
model saw (``ScreenMap``). Every rendering is checked by parsing it back: ``demo_reply`` returns
the text together with the action the parser reads from it, which is what the harness then runs.

``grid`` rounds points (in the model's image coordinates, or on Qwen3-VL's 0..999 grid) to
multiples of ``grid``: with the tiny model's tokenizer, multiples of 7 up to 217 are single tokens,
so a demonstrated coordinate is one token to predict rather than a varying split of digits. A
rounded point may miss a small target; callers replay the rounded actions and keep only episodes
that still succeed.
"""

from __future__ import annotations

import json

import numpy as np

from vlrl.harness import Action
from vlrl.rollout.parsers import PARSERS, ScreenMap
from vlrl.rollout.parsers.base import DEFAULT_WAIT_S, NORMALISED_MAX
from vlrl.rollout.protocol import GenerateResult

FORMATS = ("qwen25vl", "qwen3vl", "pyautogui")
"""Action formats a demonstration can be written in."""

_QWEN_POINT = {"click": "left_click", "double_click": "double_click", "right_click": "right_click", "move": "mouse_move"}
_PYAUTOGUI_POINT = {"click": "click", "double_click": "doubleClick", "right_click": "rightClick", "move": "moveTo"}


class UnwritableAction(ValueError):
    """An action the format has no way to write (or a format without a writer)."""


def demo_reply(action: Action, action_format: str, screen: ScreenMap, *, grid: int = 1) -> tuple[str, Action]:
    """``(text, parsed)``: the reply that asks for ``action`` in ``action_format``, and the action
    the strict parser reads from it (``action`` up to pixel rounding and ``grid``)."""
    text = action_text(action, action_format, screen, grid=grid)
    return text, PARSERS[action_format].parse(text, screen)


def demo_answer(reply: str, tokenizer, stop_token: int, request_id: str) -> GenerateResult:
    """``reply`` as an engine would have answered it: its ids and the stop token, with zero
    logprobs (no sampling policy: the warm start's likelihood loss reads none)."""
    ids = [int(t) for t in tokenizer.encode(reply, add_special_tokens=False)] + [stop_token]
    return GenerateResult(request_id, np.asarray(ids, np.int32), np.zeros(len(ids), np.float32), "stop", 0, 0, 0)


def action_text(action: Action, action_format: str, screen: ScreenMap, *, grid: int = 1) -> str:
    """The reply text of ``action`` in ``action_format`` (one of ``FORMATS``)."""
    if grid < 1:
        raise ValueError(f"grid={grid}; expected an int >= 1")
    if action_format in ("qwen25vl", "qwen3vl"):
        return _qwen(action, _Points(screen, grid, normalised=action_format == "qwen3vl"))
    if action_format == "pyautogui":
        return _pyautogui(action, _Points(screen, grid, normalised=False))
    raise UnwritableAction(f"action format {action_format!r} has no demonstration writer; expected one of {FORMATS}")


class _Points:
    """Screen pixels -> the numbers the model writes: image pixels, or the 0..999 grid."""

    def __init__(self, screen: ScreenMap, grid: int, *, normalised: bool) -> None:
        self.screen, self.grid, self.normalised = screen, grid, normalised

    def __call__(self, x: int, y: int) -> list[int]:
        s = self.screen
        if self.normalised:  # inverse of ScreenMap.from_normalised
            fx, fy = x * NORMALISED_MAX / max(s.screen_width - 1, 1), y * NORMALISED_MAX / max(s.screen_height - 1, 1)
            top_x = top_y = NORMALISED_MAX
        else:  # inverse of ScreenMap.from_image
            fx, fy = x * s.image_width / s.screen_width, y * s.image_height / s.screen_height
            top_x, top_y = s.image_width - 1, s.image_height - 1
        return [self._snap(fx, top_x), self._snap(fy, top_y)]

    def _snap(self, value: float, top: int) -> int:
        snapped = round(value / self.grid) * self.grid
        while snapped > top:
            snapped -= self.grid
        return max(0, int(snapped))


def _qwen(action: Action, point: _Points) -> str:
    kind = action.kind
    if kind in _QWEN_POINT:
        args: dict[str, object] = {"action": _QWEN_POINT[kind], "coordinate": point(action.x, action.y)}
    elif kind == "drag":
        args = {
            "action": "left_click_drag",
            "start_coordinate": point(action.x, action.y),
            "coordinate": point(action.to_x, action.to_y),
        }
    elif kind == "type":
        args = {"action": "type", "text": action.text}
    elif kind == "key":
        args = {"action": "key", "keys": list(action.keys)}
    elif kind == "scroll":
        if action.scroll_x and action.scroll_y:
            raise UnwritableAction("a scroll both across and down has no computer_use form; split it in two")
        name, notches = ("hscroll", action.scroll_x) if action.scroll_x else ("scroll", -action.scroll_y)
        args = {"action": name, "pixels": notches, "coordinate": point(action.x, action.y)}
    elif kind == "wait":
        args = {"action": "wait", "time": action.seconds}
    elif kind == "done":
        args = {"action": "terminate", "status": "success"} if action.text is None else {"action": "answer", "text": action.text}
    elif kind == "fail":
        args = {"action": "terminate", "status": "failure"}
    else:  # pragma: no cover - ACTION_KINDS is closed
        raise UnwritableAction(f"action kind {kind!r} has no computer_use form")
    call = {"name": "computer_use", "arguments": args}
    return f"<tool_call>{json.dumps(call, ensure_ascii=False)}</tool_call>"


def _pyautogui(action: Action, point: _Points) -> str:
    kind = action.kind
    if kind in _PYAUTOGUI_POINT:
        x, y = point(action.x, action.y)
        return f"pyautogui.{_PYAUTOGUI_POINT[kind]}({x}, {y})"
    if kind == "drag":
        (x, y), (to_x, to_y) = point(action.x, action.y), point(action.to_x, action.to_y)
        return f"pyautogui.moveTo({x}, {y}); pyautogui.dragTo({to_x}, {to_y})"
    if kind == "type":
        return f"pyautogui.write({json.dumps(action.text, ensure_ascii=False)})"
    if kind == "key":
        keys = ", ".join(json.dumps(k) for k in action.keys)
        return f"pyautogui.press({keys})" if len(action.keys) == 1 else f"pyautogui.hotkey({keys})"
    if kind == "scroll":
        if action.scroll_x and action.scroll_y:
            raise UnwritableAction("a scroll both across and down has no single pyautogui call; split it in two")
        x, y = point(action.x, action.y)
        name, clicks = ("hscroll", action.scroll_x) if action.scroll_x else ("scroll", -action.scroll_y)
        return f"pyautogui.{name}({clicks}, x={x}, y={y})"
    if kind == "wait" and action.seconds == DEFAULT_WAIT_S:
        return "WAIT"
    if kind == "done" and action.text is None:
        return "DONE"
    if kind == "fail":
        return "FAIL"
    raise UnwritableAction(f"{kind} action {action} has no pyautogui form")
