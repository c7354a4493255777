"""The widget model: plain mutable records with a pixel rectangle and the state tasks check.

Each widget is named ``kind:label`` (``button:Save``, ``field:Email``); the name is what
``info["hit"]`` reports and labels are unique per kind within a scene.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from harnesses.desktop.geometry import Rect


@dataclass(eq=False, slots=True)
class Widget:
    kind: ClassVar[str] = "widget"
    label: str
    rect: Rect

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.label}"


@dataclass(eq=False, slots=True)
class Label(Widget):
    """Static text; not interactive, so a click on it hits its window."""

    kind: ClassVar[str] = "label"
    muted: bool = False


@dataclass(eq=False, slots=True)
class Button(Widget):
    kind: ClassVar[str] = "button"
    closes: bool = False
    """Pressing it closes its window (dialog buttons, Submit)."""
    big: bool = False
    presses: int = 0


@dataclass(eq=False, slots=True)
class CloseButton(Button):
    """The x in a title bar; ``label`` is the window title."""

    kind: ClassVar[str] = "close"
    closes: bool = True


@dataclass(eq=False, slots=True)
class TextField(Widget):
    kind: ClassVar[str] = "field"
    text: str = ""
    all_selected: bool = False
    """After ctrl+a: typing replaces the text, backspace clears it."""

    MAX_CHARS: ClassVar[int] = 40


@dataclass(eq=False, slots=True)
class Checkbox(Widget):
    """``rect`` spans box and caption: clicking the caption toggles too."""

    kind: ClassVar[str] = "checkbox"
    checked: bool = False


@dataclass(eq=False, slots=True)
class Slider(Widget):
    """A horizontal 0..100 slider; ``rect`` is the track (knob height), its value is drawn right of it."""

    kind: ClassVar[str] = "slider"
    value: int = 50
    LOW: ClassVar[int] = 0
    HIGH: ClassVar[int] = 100

    def value_at(self, px: int) -> int:
        frac = (px - self.rect.x) / max(1, self.rect.w - 1)
        return max(self.LOW, min(self.HIGH, round(self.LOW + frac * (self.HIGH - self.LOW))))

    def x_of(self, value: int) -> int:
        return self.rect.x + round((value - self.LOW) / (self.HIGH - self.LOW) * (self.rect.w - 1))


@dataclass(eq=False, slots=True)
class Menu(Widget):
    """A menu-bar title; clicking it drops its ``items`` down."""

    kind: ClassVar[str] = "menu"
    items: tuple[str, ...] = ()
    chosen: str | None = None


@dataclass(eq=False, slots=True)
class Icon(Widget):
    """A file or app icon: click selects, double-click (or enter) opens, right-click shows ``menu``."""

    kind: ClassVar[str] = "icon"
    glyph: str = "app"
    """"app", "folder" or "doc"."""
    color: tuple[int, int, int] = (80, 80, 200)
    menu: tuple[str, ...] = ()
    selected: bool = False
    opened: bool = False
    chosen: str | None = None
    """The context-menu item last chosen on it."""


@dataclass(eq=False, slots=True)
class ListBox(Widget):
    """A scrollable list showing ``rows`` items from ``offset``, with a scroll bar on the right."""

    kind: ClassVar[str] = "list"
    items: tuple[str, ...] = ()
    rows: int = 5
    offset: int = 0
    selected: str | None = None
    bar: int = 10
    """Width of the scroll bar; its top and bottom squares are arrow buttons."""

    @property
    def row_h(self) -> int:
        return self.rect.h // self.rows

    @property
    def max_offset(self) -> int:
        return max(0, len(self.items) - self.rows)

    def scroll(self, notches: int) -> None:
        self.offset = max(0, min(self.max_offset, self.offset + notches))

    def visible(self, item: str) -> bool:
        return self.offset <= self.items.index(item) < self.offset + self.rows

    def row_rect(self, item: str) -> Rect:
        """Rectangle of a visible ``item``'s row, scroll bar excluded."""
        slot = self.items.index(item) - self.offset
        return Rect(self.rect.x, self.rect.y + slot * self.row_h, self.rect.w - self.bar, self.row_h)


W = TypeVar("W", bound=Widget)


@dataclass(eq=False, slots=True)
class Window:
    title: str
    rect: Rect
    title_h: int
    widgets: list[Widget] = field(default_factory=list)
    menubar: int = 0
    """Height of the menu bar under the title (0: none); its ``Menu`` widgets sit in it."""
    default: Button | None = None
    """Pressed by enter while a field of this window has focus."""
    closed_by: str | None = None
    close: CloseButton = field(init=False)

    def __post_init__(self) -> None:
        side = self.title_h - 4
        self.close = CloseButton(self.title, Rect(self.rect.right - side - 3, self.rect.y + 2, side, side))

    @property
    def name(self) -> str:
        return f"window:{self.title}"

    @property
    def closed(self) -> bool:
        return self.closed_by is not None

    @property
    def body(self) -> Rect:
        """The client area under title and menu bars."""
        top = self.title_h + self.menubar
        return Rect(self.rect.x, self.rect.y + top, self.rect.w, self.rect.h - top)

    def add(self, widget: W) -> W:
        self.widgets.append(widget)
        return widget
