"""Typed actions as XTest input through ``xdotool``, in pixels of the screenshot (the screen is
exactly the screenshot's size); the harness's key policy has refused what a real desktop must
not get before an action reaches here (``vlrl.harness.key_policy``).

Pointer moves are not ``--sync``: xdotool then waits for the pointer to move, forever when it is
already there; the X server applies a move and the following click in order anyway."""

from __future__ import annotations

import subprocess
import time

from vlrl.harness import Action, HarnessError

XDOTOOL_KEYS = {
    "enter": "Return", "tab": "Tab", "escape": "Escape", "backspace": "BackSpace", "delete": "Delete",
    "space": "space", "up": "Up", "down": "Down", "left": "Left", "right": "Right", "home": "Home",
    "end": "End", "pageup": "Prior", "pagedown": "Next", "insert": "Insert", "ctrl": "ctrl", "alt": "alt",
    "shift": "shift", "meta": "super", **{f"f{i}": f"F{i}" for i in range(1, 13)},
}  # fmt: skip
"""vlrl key names -> X keysym names; a single character is sent as its own keysym name."""

_CHAR_KEYSYMS = {
    " ": "space", "+": "plus", "-": "minus", "*": "asterisk", "/": "slash", "=": "equal", ".": "period",
    ",": "comma", ";": "semicolon", ":": "colon", "'": "apostrophe", '"': "quotedbl", "\\": "backslash",
    "[": "bracketleft", "]": "bracketright", "(": "parenleft", ")": "parenright", "<": "less", ">": "greater",
    "?": "question", "!": "exclam", "@": "at", "#": "numbersign", "$": "dollar", "%": "percent", "^": "asciicircum",
    "&": "ampersand", "_": "underscore", "`": "grave", "~": "asciitilde", "{": "braceleft", "}": "braceright",
    "|": "bar",
}  # fmt: skip
TYPE_DELAY_MS = 8
"""Between typed characters: GTK apps drop keys sent faster than they are read."""


def perform(env: dict[str, str], action: Action) -> None:
    """Apply ``action`` on the session whose environment is ``env``."""
    match action.kind:
        case "click" | "double_click" | "right_click":
            button = "3" if action.kind == "right_click" else "1"
            repeat = ["--repeat", "2", "--delay", "60"] if action.kind == "double_click" else []
            _xdotool(env, "mousemove", str(action.x), str(action.y), "click", *repeat, button)
        case "move":
            _xdotool(env, "mousemove", str(action.x), str(action.y))
        case "drag":
            _xdotool(
                env, "mousemove", str(action.x), str(action.y), "mousedown", "1",
                "mousemove", str(action.to_x), str(action.to_y), "mouseup", "1",
            )  # fmt: skip
        case "scroll":
            clicks = []
            if action.scroll_y:
                clicks += ["click", "--repeat", str(abs(action.scroll_y)), "5" if action.scroll_y > 0 else "4"]
            if action.scroll_x:
                clicks += ["click", "--repeat", str(abs(action.scroll_x)), "7" if action.scroll_x > 0 else "6"]
            _xdotool(env, "mousemove", str(action.x), str(action.y), *clicks)
        case "type":
            _xdotool(env, "type", "--delay", str(TYPE_DELAY_MS), "--", action.text)
        case "key":
            _xdotool(env, "key", "--clearmodifiers", "--", "+".join(keysym(k) for k in action.keys))
        case "wait":
            time.sleep(action.seconds or 0.0)
        case "done" | "fail":
            pass


def keysym(key: str) -> str:
    """The X keysym name of a vlrl key name or single character."""
    if key in XDOTOOL_KEYS:
        return XDOTOOL_KEYS[key]
    if len(key) == 1 and (key.isalnum() and key.isascii()):
        return key
    if key in _CHAR_KEYSYMS:
        return _CHAR_KEYSYMS[key]
    raise HarnessError(f"key {key!r} has no X keysym name this harness knows")


def _xdotool(env: dict[str, str], *args: str) -> None:
    done = subprocess.run(["xdotool", *args], env=env, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise HarnessError(f"xdotool {' '.join(args[:3])}... failed: {done.stderr.strip()[-300:]}")
