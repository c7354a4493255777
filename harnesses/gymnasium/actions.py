"""How vlrl's typed actions reach a wrapped env's action space.

- **vlrl's own action space** (``vlrl.gym.action_space``: a vlrl harness behind the bridge): every
  action, ``wait``/``done``/``fail`` included, its points scaled from the screenshot to the env's
  screen.
- **``Discrete(n)``**: a ``key`` action of one key. By default key ``"0"``..``"9"``, ``"a"``..``"z"``
  is action ``start + i`` (the first 36), and the names of ``get_action_meanings()`` (Atari's) that
  are vlrl keys (``UP`` -> ``up``) name theirs too; the ``keys`` setting replaces both.
- **``Box`` of shape (2,) with finite bounds**: a ``click``, its pixel mapped linearly from
  ``[0, W - 1] x [0, H - 1]`` of the screenshot onto ``[low, high]`` (rounded for integer boxes).

With the last two, ``wait``, ``done`` and ``fail`` never reach the env (``passes_control`` is
False: the harness handles them); any other action is an ``ActionError`` naming what is accepted.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from vlrl.gym.spaces import decode, encode, screen_of
from vlrl.harness import NAMED_KEYS, Action, ActionError

INDEX_KEYS = string.digits + string.ascii_lowercase
"""Default key of action i of a ``Discrete`` space."""
_LOCAL = "wait, done and fail"


class VlrlActions:
    """A vlrl harness's action space: every action passes, scaled to the env's screen."""

    passes_control = True

    def __init__(self, screen: tuple[int, int], env_screen: tuple[int, int]) -> None:
        self.screen, self.env_screen = screen, env_screen

    def env_action(self, action: Action) -> dict[str, Any]:
        return encode(_scaled(action, self.screen, self.env_screen))

    def from_env(self, env_action: Mapping[str, Any]) -> Action:
        """An env action (the env's oracle) as an action on the screenshot."""
        return _scaled(decode(env_action), self.env_screen, self.screen)


class KeyActions:
    """A ``Discrete`` space: one named key per action."""

    passes_control = False

    def __init__(self, name: str, space: spaces.Discrete, keys: Mapping[str, int]) -> None:
        self.name, self.space, self.keys = name, space, dict(keys)

    def env_action(self, action: Action) -> np.int64:
        if action.kind == "key" and len(action.keys) == 1 and action.keys[0] in self.keys:
            return np.int64(self.space.start + self.keys[action.keys[0]])
        raise ActionError(
            f"{self.name}: {_describe(action)} has no {self.space} action; "
            f"it takes a key action of one key among {sorted(self.keys)}, and {_LOCAL}"
        )


class PointActions:
    """A ``Box`` of shape (2,): a click at a point of the screen."""

    passes_control = False

    def __init__(self, name: str, space: spaces.Box, screen: tuple[int, int]) -> None:
        self.name, self.space, self.screen = name, space, screen

    def env_action(self, action: Action) -> np.ndarray:
        if action.kind != "click":
            raise ActionError(
                f"{self.name}: {_describe(action)} has no {self.space} action; it takes click, and {_LOCAL}"
            )
        fraction = np.array([action.x, action.y]) / np.maximum(np.array(self.screen) - 1, 1)
        point = self.space.low + fraction * (self.space.high - self.space.low)
        if np.issubdtype(self.space.dtype, np.integer):
            point = np.rint(point)
        return point.astype(self.space.dtype)


def action_map(
    name: str,
    space: spaces.Space[Any],
    screen: tuple[int, int],
    *,
    keys: Mapping[str, int] | None,
    meanings: list[str] | None,
) -> VlrlActions | KeyActions | PointActions:
    """The mapping onto ``space`` for a ``screen`` (width, height) screenshot; ``ValueError`` for a
    space it cannot map or a ``keys`` setting that does not fit."""
    if keys is not None and not isinstance(space, spaces.Discrete):
        raise ValueError(f"gymnasium harness setting keys: {name} has a {space} action space; keys needs Discrete(n)")
    env_screen = screen_of(space)
    if env_screen is not None:
        return VlrlActions(screen, env_screen)
    if isinstance(space, spaces.Discrete):
        n = int(space.n)
        if keys is None:
            keys = {key: i for i, key in enumerate(INDEX_KEYS[:n])}
            keys |= {m.lower(): i for i, m in enumerate(meanings or ()) if m.lower() in NAMED_KEYS}
        return KeyActions(name, space, _checked_keys(keys, n))
    if isinstance(space, spaces.Box) and space.shape == (2,) and space.is_bounded():
        return PointActions(name, space, screen)
    raise ValueError(
        f"gymnasium harness: {name} has a {space} action space; expected vlrl's action space (vlrl.gym), "
        "Discrete(n), or a bounded Box of shape (2,)"
    )


def _checked_keys(keys: object, n: int) -> dict[str, int]:
    if not isinstance(keys, Mapping):
        raise ValueError(f"gymnasium harness setting keys={keys!r}; expected a mapping of key names to action indices")
    for key, index in keys.items():
        try:
            Action.key(key)
        except ActionError as error:
            raise ValueError(f"gymnasium harness setting keys: {error}") from error
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
            raise ValueError(f"gymnasium harness setting keys[{key!r}]={index!r}; expected an action index in [0, {n})")
    return dict(keys)


def _scaled(action: Action, source: tuple[int, int], target: tuple[int, int]) -> Action:
    if source == target:
        return action
    (sw, sh), (tw, th) = source, target
    points = {"x": (sw, tw), "y": (sh, th), "to_x": (sw, tw), "to_y": (sh, th)}
    changes = {f: getattr(action, f) * t // s for f, (s, t) in points.items() if getattr(action, f) is not None}
    return dataclasses.replace(action, **changes)


def _describe(action: Action) -> str:
    return f"a key action {action.keys}" if action.kind == "key" else f"a {action.kind} action"
