"""Key names as models write them (pyautogui, xdotool, browser, macOS spellings) mapped onto the
harness's ``NAMED_KEYS``; single characters pass through as written."""

from __future__ import annotations

from collections.abc import Iterable

from vlrl.harness import NAMED_KEYS
from vlrl.rollout.parsers.base import ParseError, brief

_ALIASES: dict[str, str] = {
    "return": "enter",
    "esc": "escape",
    "del": "delete",
    "ins": "insert",
    "spacebar": "space",
    "pgup": "pageup",
    "pgdn": "pagedown",
    "arrowup": "up",
    "arrowdown": "down",
    "arrowleft": "left",
    "arrowright": "right",
    "control": "ctrl",
    "ctrlleft": "ctrl",
    "ctrlright": "ctrl",
    "option": "alt",
    "opt": "alt",
    "altleft": "alt",
    "altright": "alt",
    "shiftleft": "shift",
    "shiftright": "shift",
    "cmd": "meta",
    "command": "meta",
    "win": "meta",
    "windows": "meta",
    "winleft": "meta",
    "winright": "meta",
    "super": "meta",
}


def normalise_key(name: str) -> str:
    """Map one key name to the harness's spelling: case-insensitive, '_' and '-' ignored
    (``Page_Down`` -> ``pagedown``); a single character is kept as written (" " is ``space``)."""
    if len(name) == 1:
        return "space" if name == " " else name
    key = name.lower().replace("_", "").replace("-", "")
    key = _ALIASES.get(key, key)
    if key not in NAMED_KEYS:
        raise ParseError(
            f"unknown key {brief(name)}; expected a single character or one of {', '.join(sorted(NAMED_KEYS))}"
        )
    return key


def key_combo(parts: Iterable[str]) -> tuple[str, ...]:
    """Normalise the keys of one chord; an entry like ``ctrl+c`` counts as two keys."""
    keys: list[str] = []
    for part in parts:
        pieces = [part] if len(part) == 1 else part.split("+")
        if "" in pieces:
            raise ParseError(
                f"key combination {brief(part)} is malformed; expected key names like 'ctrl c' or ['ctrl', 'c']"
            )
        keys.extend(normalise_key(piece) for piece in pieces)
    return tuple(keys)
