"""vlrl actions onto MiniWoB's action primitives, and the screen <-> page pixel mapping.

The agent sees the 160x210 task area upscaled ``scale`` times by pixel repetition, so upscaled
pixel (x, y) shows page pixel (x // scale, y // scale): that is where its actions land, and a
page pixel is shown (and aimed at by the oracle) at the centre of its ``scale`` x ``scale`` block.

Each kind runs through the function of ``miniwob.selenium_actions`` behind the matching
``ActionTypes`` entry (CLICK_COORDS, DBLCLICK_COORDS, MOVE_COORDS, MOUSEDOWN/MOUSEUP_COORDS for a
drag, PRESS_KEY, TYPE_TEXT). Two kinds MiniWoB lacks are plain Selenium actions: a right click,
and a scroll that may also go sideways (its SCROLL_*_COORDS only go up or down, 50 px a notch).
"""

from __future__ import annotations

from miniwob import selenium_actions
from miniwob.constants import DEFAULT_SCROLL_AMOUNT, DEFAULT_SCROLL_TIME
from selenium.webdriver import Chrome
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.mouse_button import MouseButton

from vlrl.harness import Action, ActionError

MODIFIER_PREFIXES = {"ctrl": "C-", "shift": "S-", "alt": "A-", "meta": "M-"}
"""vlrl modifier names -> the prefixes of MiniWoB's PRESS_KEY syntax."""

SPECIAL_KEYS = {
    "enter": "<Enter>", "tab": "<Tab>", "escape": "<Escape>", "backspace": "<Backspace>",
    "delete": "<Delete>", "space": "<Space>", "up": "<ArrowUp>", "down": "<ArrowDown>",
    "left": "<ArrowLeft>", "right": "<ArrowRight>", "home": "<Home>", "end": "<End>",
    "pageup": "<PageUp>", "pagedown": "<PageDown>", "insert": "<Insert>",
    "ctrl": "<Control>", "shift": "<Shift>", "alt": "<Alt>", "meta": "<Meta>",
    **{f"f{i}": f"<F{i}>" for i in range(1, 13)},
}
"""vlrl named keys -> MiniWoB's ``<...>`` key names (``miniwob.constants.WEBDRIVER_SPECIAL_KEYS``)."""


def to_page(x: int, y: int, scale: int) -> tuple[int, int]:
    """The page pixel an upscaled screenshot pixel shows."""
    return x // scale, y // scale


def to_screen(x: int, y: int, scale: int) -> tuple[int, int]:
    """The upscaled pixel at the centre of page pixel (x, y)'s block."""
    return x * scale + scale // 2, y * scale + scale // 2


def key_chord(keys: tuple[str, ...]) -> str:
    """A key action as MiniWoB's PRESS_KEY string: modifiers as prefixes, then one key
    (``("ctrl", "a")`` -> ``"C-a"``; a chord of modifiers alone presses its last one)."""
    modifiers = [key for key in keys if key in MODIFIER_PREFIXES]
    others = [key for key in keys if key not in MODIFIER_PREFIXES]
    if len(others) > 1:
        raise ActionError(
            f"key action {list(keys)}: MiniWoB presses modifiers plus one key; got the keys {others}"
        )
    main = others[0] if others else modifiers.pop()
    return "".join(MODIFIER_PREFIXES[m] for m in modifiers) + SPECIAL_KEYS.get(main, main)


def perform(driver: Chrome, action: Action, scale: int) -> None:
    """Run one GUI action (not wait/done/fail) on the page."""
    if action.kind == "type":
        selenium_actions.execute_type_text(action.text, driver)
        return
    if action.kind == "key":
        selenium_actions.execute_press_key(key_chord(action.keys), driver)
        return
    x, y = to_page(action.x, action.y, scale)
    if action.kind == "click":
        selenium_actions.execute_click_coords(x, y, driver)
    elif action.kind == "double_click":
        selenium_actions.execute_dblclick_coords(x, y, driver)
    elif action.kind == "move":
        selenium_actions.execute_move_coords(x, y, driver)
    elif action.kind == "drag":
        selenium_actions.execute_mousedown_coords(x, y, driver)
        selenium_actions.execute_mouseup_coords(*to_page(action.to_x, action.to_y, scale), driver)
    elif action.kind == "right_click":
        chain = ActionChains(driver, duration=0)
        chain.w3c_actions.pointer_action.move_to_location(x, y)
        chain.w3c_actions.pointer_action.click(button=MouseButton.RIGHT)
        chain.w3c_actions.perform()
    elif action.kind == "scroll":
        chain = ActionChains(driver)
        chain.w3c_actions.wheel_action.scroll(
            x=x,
            y=y,
            delta_x=action.scroll_x * DEFAULT_SCROLL_AMOUNT,
            delta_y=action.scroll_y * DEFAULT_SCROLL_AMOUNT,
            duration=DEFAULT_SCROLL_TIME,
        )
        chain.w3c_actions.perform()
    else:
        raise ActionError(f"{action.kind} action is not a GUI action MiniWoB can perform")
