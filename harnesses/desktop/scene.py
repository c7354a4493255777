"""The desktop state one episode mutates: windows back to front, desktop icons, keyboard focus and
the open popup (a dropped-down menu or a context menu). It is re-rendered after every action."""

from __future__ import annotations

from dataclasses import dataclass, field

from harnesses.desktop.geometry import Rect
from harnesses.desktop.style import Metrics, Palette
from harnesses.desktop.widgets import Icon, Menu, TextField, Widget, Window


@dataclass(eq=False, slots=True)
class Popup:
    owner: Menu | Icon
    rect: Rect
    row: int

    @property
    def items(self) -> tuple[str, ...]:
        return self.owner.items if isinstance(self.owner, Menu) else self.owner.menu

    def item_rect(self, item: str) -> Rect:
        return Rect(self.rect.x, self.rect.y + self.items.index(item) * self.row, self.rect.w, self.row)

    def item_at(self, px: int, py: int) -> str | None:
        if not self.rect.contains(px, py):
            return None
        return self.items[min(len(self.items) - 1, (py - self.rect.y) // self.row)]


@dataclass(eq=False, slots=True)
class Scene:
    width: int
    height: int
    metrics: Metrics
    palette: Palette
    clock: str
    """Shown in the taskbar; drawn from the seed like everything else."""
    windows: list[Window] = field(default_factory=list)
    icons: list[Icon] = field(default_factory=list)
    focus: TextField | None = None
    popup: Popup | None = None

    @property
    def work(self) -> Rect:
        """The screen above the taskbar, where windows and icons go."""
        return Rect(0, 0, self.width, self.height - self.metrics.taskbar)

    def open_windows(self) -> list[Window]:
        return [w for w in self.windows if not w.closed]

    def window_of(self, widget: Widget) -> Window | None:
        return next((w for w in self.windows if widget is w.close or widget in w.widgets), None)

    def all_icons(self) -> list[Icon]:
        """Icons on the desktop and in windows (a file manager shows files as icons)."""
        return self.icons + [w for window in self.windows for w in window.widgets if isinstance(w, Icon)]

    def hit_test(self, px: int, py: int) -> Widget | Window | Popup | None:
        """The topmost thing under a pixel: the popup, then windows front to back, then icons."""
        if self.popup is not None and self.popup.rect.contains(px, py):
            return self.popup
        for window in reversed(self.open_windows()):
            if not window.rect.contains(px, py):
                continue
            if window.close.rect.contains(px, py):
                return window.close
            for widget in reversed(window.widgets):
                if widget.kind != "label" and widget.rect.contains(px, py):
                    return widget
            return window
        return next((icon for icon in reversed(self.icons) if icon.rect.contains(px, py)), None)

    def open_popup(self, owner: Menu | Icon, px: int, py: int) -> None:
        """Show ``owner``'s items with the top-left corner at (px, py), kept on the screen."""
        m = self.metrics
        items = owner.items if isinstance(owner, Menu) else owner.menu
        w = max(m.text_w(item) for item in items) + 3 * m.pad
        row = m.row
        h = row * len(items)
        x = max(0, min(px, self.width - w))
        y = max(0, min(py, self.height - h))
        self.popup = Popup(owner, Rect(x, y, w, h), row)

    def close_window(self, window: Window, by: str) -> None:
        window.closed_by = by
        if self.focus is not None and self.focus in window.widgets:
            self.focus = None
        if self.popup is not None and self.popup.owner in window.widgets:
            self.popup = None
