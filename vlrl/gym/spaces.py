"""vlrl's observations and typed actions as Gymnasium spaces.

An observation is ``{"screenshot": Box(0, 255, (H, W, 3), uint8), "goal": Text}``. An action is a
``Dict`` with one entry per field an ``Action`` may use; ``kind`` says which action it is and the
entries its kind does not use are ignored:

- ``kind``: ``Discrete(11)``, an index into ``ACTION_KINDS``;
- ``point``: ``MultiDiscrete([W, H])``, the (x, y) pixel of the pointer kinds and a drag's start;
- ``to``: ``MultiDiscrete([W, H])``, a drag's end;
- ``scroll``: ``MultiDiscrete([4, 50], start=[0, 1])``, a direction of ``SCROLL_DIRECTIONS`` and
  1 to 50 wheel notches (one axis per action);
- ``text``: ``Text(1, 2000)``, what a ``type`` action types;
- ``answer``: ``Text(0, 2000)``, the answer of ``done`` or the reason of ``fail`` ("" for none);
- ``keys``: ``MultiDiscrete([K, K + 1, K + 1, K + 1])``, a chord: the first key is ``KEYS[i]``,
  each further one ``KEYS[i - 1]`` or none for 0;
- ``seconds``: ``Box(0, 10, (), float32)``, how long a ``wait`` waits.

Every element of the action space is a valid ``Action`` (a sample never raises), which is why
scrolls take one axis and ``text`` and ``answer`` are two entries. Text is printable ASCII plus tab
and newline (``CHARSET``): a goal with other characters is passed on unchanged but lies outside
the observation space.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from vlrl.harness import ACTION_KINDS, NAMED_KEYS, Action, ActionError
from vlrl.harness.actions import MAX_TEXT, MAX_WAIT_S

CHARSET = "".join(c for c in string.printable if c not in "\r\x0b\x0c")
"""The characters of the Text spaces: printable ASCII, tab and newline."""
KEYS: tuple[str, ...] = tuple(sorted(NAMED_KEYS)) + tuple(c for c in CHARSET if c.isprintable())
"""Key names by index in the ``keys`` entry: the named keys, then the printable characters."""
SCROLL_DIRECTIONS = ("down", "up", "right", "left")
MAX_NOTCHES = 50
MAX_GOAL = 4096
"""Longest goal the observation space holds."""

_POINTER_KINDS = ("click", "double_click", "right_click", "move", "drag", "scroll")
_STEP = {"down": (0, 1), "up": (0, -1), "right": (1, 0), "left": (-1, 0)}
_DIRECTION_OF = {step: name for name, step in _STEP.items()}


def observation_space(width: int, height: int) -> spaces.Dict:
    """The observations of a ``width`` x ``height`` screen."""
    return spaces.Dict(
        {
            "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
            "goal": spaces.Text(MAX_GOAL, min_length=0, charset=CHARSET),
        }
    )


def action_space(width: int, height: int) -> spaces.Dict:
    """The actions on a ``width`` x ``height`` screen."""
    chord = len(KEYS) + 1
    return spaces.Dict(
        {
            "kind": spaces.Discrete(len(ACTION_KINDS)),
            "point": spaces.MultiDiscrete([width, height]),
            "to": spaces.MultiDiscrete([width, height]),
            "scroll": spaces.MultiDiscrete([len(SCROLL_DIRECTIONS), MAX_NOTCHES], start=[0, 1]),
            "text": spaces.Text(MAX_TEXT, min_length=1, charset=CHARSET),
            "answer": spaces.Text(MAX_TEXT, min_length=0, charset=CHARSET),
            "keys": spaces.MultiDiscrete([len(KEYS), chord, chord, chord]),
            "seconds": spaces.Box(0.0, MAX_WAIT_S, (), np.float32),
        }
    )


_FIELDS = tuple(action_space(1, 1).spaces)


def screen_of(space: spaces.Space[Any]) -> tuple[int, int] | None:
    """The (width, height) of ``space`` if it is vlrl's action space, else None."""
    if not isinstance(space, spaces.Dict) or not isinstance(space.spaces.get("point"), spaces.MultiDiscrete):
        return None
    width, height = (int(n) for n in space["point"].nvec)
    return (width, height) if space == action_space(width, height) else None


def encode(action: Action) -> dict[str, Any]:
    """``action`` as an element of the action space (of any screen it fits)."""
    fields: dict[str, Any] = {
        "kind": ACTION_KINDS.index(action.kind),
        "point": np.array([action.x or 0, action.y or 0], dtype=np.int64),
        "to": np.array([action.to_x or 0, action.to_y or 0], dtype=np.int64),
        "scroll": np.array([0, 1], dtype=np.int64),
        "text": action.text if action.kind == "type" else " ",
        "answer": (action.text or "") if action.kind in ("done", "fail") else "",
        "keys": np.zeros(4, dtype=np.int64),
        "seconds": np.array(action.seconds, dtype=np.float32),
    }
    if action.kind == "scroll":
        if action.scroll_x and action.scroll_y:
            raise ActionError(
                f"scroll action ({action.scroll_x}, {action.scroll_y}): the gym action space scrolls one axis"
            )
        step = (int(np.sign(action.scroll_x)), int(np.sign(action.scroll_y)))
        direction = SCROLL_DIRECTIONS.index(_DIRECTION_OF[step])
        fields["scroll"] = np.array([direction, abs(action.scroll_x or action.scroll_y)], dtype=np.int64)
    if action.kind == "key":
        fields["keys"] = np.array(
            [KEYS.index(action.keys[0])] + [KEYS.index(k) + 1 for k in action.keys[1:]] + [0] * (4 - len(action.keys)),
            dtype=np.int64,
        )
    return fields


def decode(action: Mapping[str, Any]) -> Action:
    """The ``Action`` an element of the action space stands for; ``ActionError`` names a bad entry."""
    if not isinstance(action, Mapping) or set(action) != set(_FIELDS):
        got = sorted(action) if isinstance(action, Mapping) else type(action).__name__
        raise ActionError(f"gym action: {got}; expected a dict with the entries {list(_FIELDS)}")
    kind = _pick(ACTION_KINDS, action["kind"], "kind")
    if kind in _POINTER_KINDS:
        x, y = _ints(action["point"], 2, "point")
        if kind == "drag":
            return Action.drag(x, y, *_ints(action["to"], 2, "to"))
        if kind == "scroll":
            direction, notches = _ints(action["scroll"], 2, "scroll")
            right, down = (notches * s for s in _STEP[_pick(SCROLL_DIRECTIONS, direction, "scroll direction")])
            return Action.scroll(x, y, down=down, right=right)
        return Action(kind=kind, x=x, y=y)
    if kind == "type":
        return Action.type(action["text"])
    if kind == "key":
        first, *rest = _ints(action["keys"], 4, "keys")
        return Action.key(_pick(KEYS, first, "keys"), *(_pick(KEYS, i - 1, "keys") for i in rest if i))
    if kind == "wait":
        return Action.wait(float(action["seconds"]))
    return Action(kind=kind, text=action["answer"] or None)


def _ints(value: Any, count: int, name: str) -> list[int]:
    array = np.asarray(value)
    if array.shape != (count,) or not np.issubdtype(array.dtype, np.integer):
        raise ActionError(f"gym action entry {name!r}: {value!r}; expected {count} integers")
    return [int(v) for v in array]


def _pick(names: tuple[str, ...], index: Any, name: str) -> str:
    array = np.asarray(index)
    if array.shape != () or not np.issubdtype(array.dtype, np.integer):
        raise ActionError(f"gym action entry {name!r}: {index!r}; expected an integer index")
    if not 0 <= int(array) < len(names):
        raise ActionError(f"gym action entry {name!r}: index {int(array)}; expected 0 <= index < {len(names)}")
    return names[int(array)]
