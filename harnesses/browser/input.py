"""Typed actions as Playwright mouse and keyboard input, in CSS pixels of the viewport (the
screenshot is taken at device scale 1, so screenshot pixels and CSS pixels coincide)."""

from __future__ import annotations

from playwright.sync_api import Page

from vlrl.harness import Action

WHEEL_PX = 100
"""Pixels one wheel notch of a ``scroll`` action scrolls (the wheel delta sent per notch)."""

DRAG_STEPS = 8
"""Intermediate mouse moves of a drag, so pages see a motion and not a jump."""

PLAYWRIGHT_KEYS: dict[str, str] = {
    "enter": "Enter", "tab": "Tab", "escape": "Escape", "backspace": "Backspace", "delete": "Delete",
    "space": " ", "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "home": "Home", "end": "End", "pageup": "PageUp", "pagedown": "PageDown", "insert": "Insert",
    "ctrl": "Control", "alt": "Alt", "shift": "Shift", "meta": "Meta",
    **{f"f{i}": f"F{i}" for i in range(1, 13)},
}
"""vlrl key names -> Playwright key names; single ASCII characters are Playwright keys as they are."""

_SETTLE = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
_SCROLLING_KINDS = frozenset({"scroll", "key", "drag"})
"""Actions that may scroll: Chromium applies scrolls a frame or two after the input call returns,
so a screenshot taken at once would miss them (measured: 14 of 15 wheel scrolls). Clicks and
typing take effect in the event handlers, before the call returns; waiting two frames (~33 ms)
after them would only slow every step."""


def perform(page: Page, action: Action) -> None:
    """Apply ``action`` (already checked against the viewport) so the next screenshot shows it."""
    mouse, keyboard = page.mouse, page.keyboard
    match action.kind:
        case "click":
            mouse.click(action.x, action.y)
        case "double_click":
            mouse.dblclick(action.x, action.y)
        case "right_click":
            mouse.click(action.x, action.y, button="right")
        case "move":
            mouse.move(action.x, action.y)
        case "drag":
            mouse.move(action.x, action.y)
            mouse.down()
            mouse.move(action.to_x, action.to_y, steps=DRAG_STEPS)
            mouse.up()
        case "scroll":
            mouse.move(action.x, action.y)
            mouse.wheel(action.scroll_x * WHEEL_PX, action.scroll_y * WHEEL_PX)
        case "type":
            keyboard.type(action.text)
        case "key":
            press(page, action.keys)
        case "wait":
            page.wait_for_timeout(action.seconds * 1000)
        case "done" | "fail":
            pass
    if action.kind in _SCROLLING_KINDS:
        page.evaluate(_SETTLE)


def press(page: Page, keys: tuple[str, ...]) -> None:
    """Hold ``keys`` down in order and release them in reverse, like a chord on a keyboard.

    Down/up per key, not ``keyboard.press("Control+a")``: a "+" key needs no escaping that way.
    A non-ASCII character is not on Playwright's US layout; it is inserted as text instead.
    """
    held = []
    try:
        for key in keys:
            name = PLAYWRIGHT_KEYS.get(key, key)
            if len(name) == 1 and not name.isascii():
                page.keyboard.insert_text(name)
                continue
            page.keyboard.down(name)
            held.append(name)
    finally:
        for name in reversed(held):
            page.keyboard.up(name)
