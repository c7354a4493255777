"""Typed GUI actions, in pixels of the screenshot the harness last returned.

Model text becomes an ``Action`` only through a strict parser; harnesses execute actions, never
text. Every action is validated on construction (the fields its kind needs, their ranges) and
against the screen size before it runs (``check_bounds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from vlrl.harness.errors import ActionError

ActionKind = Literal[
    "click", "double_click", "right_click", "move", "drag", "scroll", "type", "key", "wait", "done", "fail"
]
ACTION_KINDS: tuple[str, ...] = get_args(ActionKind)

NAMED_KEYS: frozenset[str] = frozenset(
    {"enter", "tab", "escape", "backspace", "delete", "space", "up", "down", "left", "right", "home", "end"}
    | {"pageup", "pagedown", "insert", "ctrl", "alt", "shift", "meta"}
    | {f"f{i}" for i in range(1, 13)}
)
"""Key names a ``key`` action may press, besides single printable characters."""

MAX_TEXT = 2000
MAX_WAIT_S = 10.0

_POINT_KINDS = {"click", "double_click", "right_click", "move", "drag", "scroll"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One GUI action. Which fields apply depends on ``kind``; the others must stay unset."""

    kind: ActionKind
    x: int | None = None
    y: int | None = None
    to_x: int | None = None
    """End point of a drag."""
    to_y: int | None = None
    scroll_x: int = 0
    """Wheel notches to scroll right (negative: left)."""
    scroll_y: int = 0
    """Wheel notches to scroll down (negative: up)."""
    text: str | None = None
    """Text to type, the answer of ``done``, or the reason of ``fail``."""
    keys: tuple[str, ...] = field(default_factory=tuple)
    """Keys pressed together, e.g. ("ctrl", "a")."""
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ActionError(f"action kind {self.kind!r} is unknown; expected one of {list(ACTION_KINDS)}")
        needs_point = self.kind in _POINT_KINDS
        for name in ("x", "y"):
            value = getattr(self, name)
            if needs_point and not _is_pixel(value):
                raise ActionError(f"{self.kind} action: {name}={value!r}; expected a pixel coordinate (int >= 0)")
            if not needs_point and value is not None:
                raise ActionError(f"{self.kind} action takes no {name} (got {value!r})")
        for name in ("to_x", "to_y"):
            value = getattr(self, name)
            if self.kind == "drag" and not _is_pixel(value):
                raise ActionError(f"drag action: {name}={value!r}; expected a pixel coordinate (int >= 0)")
            if self.kind != "drag" and value is not None:
                raise ActionError(f"{self.kind} action takes no {name} (got {value!r})")
        if self.kind == "scroll":
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (self.scroll_x, self.scroll_y)):
                raise ActionError(f"scroll action: scroll_x/scroll_y must be ints, got {self.scroll_x!r}, {self.scroll_y!r}")
            if (self.scroll_x, self.scroll_y) == (0, 0) or max(abs(self.scroll_x), abs(self.scroll_y)) > 50:
                raise ActionError(
                    f"scroll action: ({self.scroll_x}, {self.scroll_y}) notches; expected a non-zero amount of at most 50"
                )
        elif (self.scroll_x, self.scroll_y) != (0, 0):
            raise ActionError(f"{self.kind} action takes no scroll amount")
        self._check_text()
        self._check_keys()
        if self.kind == "wait":
            if not (isinstance(self.seconds, (int, float)) and math.isfinite(self.seconds)):
                raise ActionError(f"wait action: seconds={self.seconds!r}; expected a number")
            if not 0 <= self.seconds <= MAX_WAIT_S:
                raise ActionError(f"wait action: seconds={self.seconds}; expected 0 <= seconds <= {MAX_WAIT_S}")
        elif self.seconds:
            raise ActionError(f"{self.kind} action takes no seconds")

    def _check_text(self) -> None:
        if self.kind == "type":
            if not isinstance(self.text, str) or not self.text:
                raise ActionError(f"type action: text={self.text!r}; expected a non-empty string")
        elif self.kind not in ("done", "fail") and self.text is not None:
            raise ActionError(f"{self.kind} action takes no text")
        if self.text is not None:
            if not isinstance(self.text, str):
                raise ActionError(f"{self.kind} action: text must be a string, got {type(self.text).__name__}")
            if len(self.text) > MAX_TEXT:
                raise ActionError(f"{self.kind} action: text of {len(self.text)} characters; at most {MAX_TEXT}")
            bad = sorted({c for c in self.text if not (c.isprintable() or c in "\n\t")})
            if bad:
                raise ActionError(f"{self.kind} action: text holds control characters {bad!r}")

    def _check_keys(self) -> None:
        if self.kind != "key":
            if self.keys:
                raise ActionError(f"{self.kind} action takes no keys")
            return
        if not isinstance(self.keys, tuple) or not 1 <= len(self.keys) <= 4:
            raise ActionError(f"key action: keys={self.keys!r}; expected a tuple of 1 to 4 key names")
        for key in self.keys:
            if not isinstance(key, str) or not (key in NAMED_KEYS or (len(key) == 1 and key.isprintable())):
                raise ActionError(
                    f"key action: key {key!r} is unknown; expected a printable character or one of {sorted(NAMED_KEYS)}"
                )

    def check_bounds(self, width: int, height: int) -> None:
        """Refuse points outside a ``width`` x ``height`` screenshot."""
        for px, py in ((self.x, self.y), (self.to_x, self.to_y)):
            if px is not None and (px >= width or py >= height):
                raise ActionError(
                    f"{self.kind} action at ({px}, {py}) is outside the {width}x{height} screenshot "
                    f"(expected 0 <= x < {width}, 0 <= y < {height})"
                )

    # Constructors that read like the action they make.
    @classmethod
    def click(cls, x: int, y: int) -> Action:
        return cls(kind="click", x=x, y=y)

    @classmethod
    def double_click(cls, x: int, y: int) -> Action:
        return cls(kind="double_click", x=x, y=y)

    @classmethod
    def right_click(cls, x: int, y: int) -> Action:
        return cls(kind="right_click", x=x, y=y)

    @classmethod
    def move(cls, x: int, y: int) -> Action:
        return cls(kind="move", x=x, y=y)

    @classmethod
    def drag(cls, x: int, y: int, to_x: int, to_y: int) -> Action:
        return cls(kind="drag", x=x, y=y, to_x=to_x, to_y=to_y)

    @classmethod
    def scroll(cls, x: int, y: int, *, down: int = 0, right: int = 0) -> Action:
        return cls(kind="scroll", x=x, y=y, scroll_y=down, scroll_x=right)

    @classmethod
    def type(cls, text: str) -> Action:
        return cls(kind="type", text=text)

    @classmethod
    def key(cls, *keys: str) -> Action:
        return cls(kind="key", keys=tuple(keys))

    @classmethod
    def wait(cls, seconds: float = 0.0) -> Action:
        return cls(kind="wait", seconds=seconds)

    @classmethod
    def done(cls, answer: str | None = None) -> Action:
        return cls(kind="done", text=answer)

    @classmethod
    def fail(cls, reason: str | None = None) -> Action:
        return cls(kind="fail", text=reason)


def _is_pixel(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
