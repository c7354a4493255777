"""The clickable, labelled things a desktop scene shows, topmost only, as ``Observation.elements``.

A widget counts where a click at its centre reaches it (a window in front hides what is behind),
so a grounding demonstration built from one ("Click "Save".") clicks exactly that widget. Close
boxes and text fields are left out: the label a user reads is not drawn on them.
"""

from __future__ import annotations

from vlrl.harness import Element

from harnesses.desktop.geometry import Rect
from harnesses.desktop.scene import Scene
from harnesses.desktop.widgets import Button, Checkbox, CloseButton, Icon, ListBox, Menu, Widget

LABELLED = (Button, Checkbox, Icon, Menu)
"""Widgets whose label is drawn on them (or right under, for icons)."""


def elements(scene: Scene) -> tuple[Element, ...]:
    found: list[Element | None] = []
    if scene.popup is not None:
        found += [_element(scene, item, scene.popup.item_rect(item)) for item in scene.popup.items]
    widgets = [w for window in scene.open_windows() for w in window.widgets] + scene.icons
    for widget in widgets:
        if isinstance(widget, ListBox):
            rows = [item for item in widget.items if widget.visible(item)]
            found += [_element(scene, item, widget.row_rect(item)) for item in rows if _reaches(scene, widget, widget.row_rect(item))]
        elif isinstance(widget, LABELLED) and not isinstance(widget, CloseButton) and _reaches(scene, widget, widget.rect):
            found.append(_element(scene, widget.label, widget.rect))
    return tuple(e for e in found if e is not None)


def _reaches(scene: Scene, widget: Widget, rect: Rect) -> bool:
    return scene.hit_test(*rect.center) is widget


def _element(scene: Scene, label: str, rect: Rect) -> Element | None:
    """The element, its box clipped to the screen (None if nothing of it is on it)."""
    x, y = max(0, rect.x), max(0, rect.y)
    w, h = min(scene.width, rect.right) - x, min(scene.height, rect.bottom) - y
    return Element(label, (x, y, w, h)) if w > 0 and h > 0 and label else None
