"""What each action does to a scene, the way a desktop toolkit would do it.

Pointer actions go to the topmost widget under the point; a click outside an open popup only
closes it (as on common desktops). Keyboard actions go to the focused text field: ``enter``
presses the window's default button, ``tab`` moves to the next field, ``ctrl+a`` selects all.
Every action returns the name of what it acted on, reported as ``info["hit"]``.
"""

from __future__ import annotations

from vlrl.harness import Action

from harnesses.desktop.scene import Popup, Scene
from harnesses.desktop.widgets import Button, Checkbox, Icon, ListBox, Menu, Slider, TextField, Widget, Window


def apply(scene: Scene, action: Action) -> str | None:
    """Run ``action`` on ``scene``; return the name of the widget it acted on, or None."""
    match action.kind:
        case "click":
            return _click(scene, action.x, action.y)
        case "double_click":
            return _double_click(scene, action.x, action.y)
        case "right_click":
            return _right_click(scene, action.x, action.y)
        case "move":
            return _name(scene.hit_test(action.x, action.y), action.x, action.y)
        case "drag":
            return _drag(scene, action.x, action.y, action.to_x, action.to_y)
        case "scroll":
            return _scroll(scene, action.x, action.y, action.scroll_y)
        case "type":
            return _type(scene, action.text)
        case "key":
            return _key(scene, action.keys)
    return None  # wait, done and fail leave the screen as it is


def _name(target: Widget | Window | Popup | None, px: int, py: int) -> str | None:
    if isinstance(target, Popup):
        return f"menu-item:{target.item_at(px, py)}"
    if isinstance(target, ListBox) and px < target.rect.right - target.bar:
        slot = target.offset + (py - target.rect.y) // target.row_h
        return f"item:{target.items[slot]}" if slot < len(target.items) else target.name
    return None if target is None else target.name


def _click(scene: Scene, px: int, py: int) -> str | None:
    target = scene.hit_test(px, py)
    popup = scene.popup
    if popup is not None:
        scene.popup = None
        if target is popup:
            popup.owner.chosen = popup.item_at(px, py)
            return _name(target, px, py)
        return None
    if scene.focus is not None and target is not scene.focus:
        scene.focus.all_selected = False
        scene.focus = None
    match target:
        case TextField():
            scene.focus = target
            target.all_selected = False
        case Button():
            _press(scene, target)
        case Checkbox():
            target.checked = not target.checked
        case Slider():
            target.value = target.value_at(px)
        case Menu():
            scene.open_popup(target, target.rect.x, target.rect.bottom)
        case Icon():
            _select(scene, target)
        case ListBox():
            _click_list(target, px, py)
    return _name(target, px, py)


def _click_list(box: ListBox, px: int, py: int) -> None:
    if px >= box.rect.right - box.bar:  # the scroll bar: its end squares are arrows
        if py < box.rect.y + box.bar:
            box.scroll(-1)
        elif py >= box.rect.bottom - box.bar:
            box.scroll(1)
        return
    slot = box.offset + (py - box.rect.y) // box.row_h
    if slot < len(box.items):
        box.selected = box.items[slot]


def _double_click(scene: Scene, px: int, py: int) -> str | None:
    first = _click(scene, px, py)
    target = scene.hit_test(px, py)
    if isinstance(target, Icon) and first == target.name:
        target.opened = True
        return first
    return _click(scene, px, py)


def _right_click(scene: Scene, px: int, py: int) -> str | None:
    scene.popup = None
    target = scene.hit_test(px, py)
    if isinstance(target, Icon) and target.menu:
        _select(scene, target)
        scene.open_popup(target, px, py)
    return _name(target, px, py)


def _drag(scene: Scene, px: int, py: int, to_x: int, to_y: int) -> str | None:
    scene.popup = None
    target = scene.hit_test(px, py)
    if isinstance(target, Slider):
        target.value = target.value_at(to_x)
    return _name(target, px, py)


def _scroll(scene: Scene, px: int, py: int, notches: int) -> str | None:
    target = scene.hit_test(px, py)
    if isinstance(target, ListBox):
        target.scroll(notches)
        return target.name  # the list scrolled, whichever row is under the pointer
    return _name(target, px, py)


def _type(scene: Scene, text: str) -> str | None:
    hit = None if scene.focus is None else scene.focus.name
    for char in text:
        if char in "\n\t":
            _key_press(scene, "enter" if char == "\n" else "tab")
        else:
            _insert(scene, char)
    return hit


def _key(scene: Scene, keys: tuple[str, ...]) -> str | None:
    hit = None if scene.focus is None else scene.focus.name
    if set(keys) == {"ctrl", "a"}:
        if scene.focus is not None:
            scene.focus.all_selected = bool(scene.focus.text)
    elif len(keys) == 1:
        _key_press(scene, keys[0])
    return hit


def _key_press(scene: Scene, key: str) -> None:
    focus = scene.focus
    if key == "escape" or (key == "enter" and scene.popup is not None):
        scene.popup = None
    elif key == "enter":
        window = None if focus is None else scene.window_of(focus)
        selected = [icon for icon in scene.all_icons() if icon.selected]
        if window is not None and window.default is not None:
            _press(scene, window.default)
        elif focus is None and selected:
            selected[0].opened = True
    elif key == "tab":
        _focus_next_field(scene)
    elif key in ("backspace", "delete") and focus is not None:
        focus.text = "" if focus.all_selected else focus.text[:-1]
        focus.all_selected = False
    elif key == "space":
        _insert(scene, " ")
    elif len(key) == 1:
        _insert(scene, key)


def _insert(scene: Scene, char: str) -> None:
    field = scene.focus
    if field is None:
        return
    if field.all_selected:
        field.text, field.all_selected = "", False
    if len(field.text) < TextField.MAX_CHARS:
        field.text += char


def _focus_next_field(scene: Scene) -> None:
    window = scene.window_of(scene.focus) if scene.focus is not None else None
    if window is None:
        windows = [w for w in scene.open_windows() if any(isinstance(x, TextField) for x in w.widgets)]
        if not windows:
            return
        window = windows[-1]
    fields = [w for w in window.widgets if isinstance(w, TextField)]
    if not fields:
        return
    after = fields.index(scene.focus) + 1 if scene.focus in fields else 0
    if scene.focus is not None:
        scene.focus.all_selected = False
    scene.focus = fields[after % len(fields)]


def _press(scene: Scene, button: Button) -> None:
    button.presses += 1
    window = scene.window_of(button)
    if button.closes and window is not None:
        scene.close_window(window, by=button.name)


def _select(scene: Scene, icon: Icon) -> None:
    for other in scene.all_icons():
        other.selected = other is icon
