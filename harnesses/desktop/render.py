"""Draw a scene with Pillow: wallpaper and icons, windows back to front, the taskbar, the popup.

Everything is re-drawn from the widget state on every call (a few ms at 320x240), so the picture
can never disagree with what the actions hit-test against.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw
from PIL.ImageFont import FreeTypeFont

from harnesses.desktop.geometry import Rect
from harnesses.desktop.scene import Popup, Scene
from harnesses.desktop.style import RGB, Metrics, Palette
from harnesses.desktop.widgets import (
    Button,
    Checkbox,
    CloseButton,
    Icon,
    Label,
    ListBox,
    Menu,
    Slider,
    TextField,
    Widget,
    Window,
)

WHITE = (255, 255, 255)
SHADOW = (20, 20, 20)
CLOSE_RED = (205, 70, 60)
MENUBAR = (248, 248, 248)
SCROLLBAR = (222, 222, 222)
THUMB = (160, 160, 160)


def render(scene: Scene) -> np.ndarray:
    """The screenshot of ``scene``: canonical RGB ``uint8 [H, W, 3]``."""
    image = Image.new("RGB", (scene.width, scene.height), scene.palette.desktop)
    pen = _Pen(ImageDraw.Draw(image), scene.metrics, scene.palette, scene)
    for icon in scene.icons:
        pen.icon(icon, on_desktop=True)
    for window in scene.open_windows():
        pen.window(window)
    pen.taskbar()
    if scene.popup is not None:
        pen.popup(scene.popup)
    return np.asarray(image)


class _Pen:
    """Draws widgets with one scene's metrics and palette."""

    def __init__(self, draw: ImageDraw.ImageDraw, metrics: Metrics, palette: Palette, scene: Scene) -> None:
        self.d, self.m, self.p, self.scene = draw, metrics, palette, scene
        self.line = max(1, metrics.f // 10)

    def text(self, x: int, y: int, text: str, fill: RGB, *, anchor: str = "lm", font: FreeTypeFont | None = None) -> None:
        self.d.text((x, y), text, fill=fill, font=font or self.m.font, anchor=anchor)

    def window(self, window: Window) -> None:
        r, m, p = window.rect, self.m, self.p
        self.d.rectangle(r.corners, fill=p.window, outline=p.border)
        bar = Rect(r.x, r.y, r.w, window.title_h)
        self.d.rectangle(bar.corners, fill=p.title)
        self.text(r.x + m.pad, bar.center[1], window.title, p.title_text)
        self.close_button(window.close)
        if window.menubar:
            strip = Rect(r.x + 1, bar.bottom, r.w - 2, window.menubar)
            self.d.rectangle(strip.corners, fill=MENUBAR)
            self.d.line((strip.x, strip.bottom - 1, strip.right - 1, strip.bottom - 1), fill=p.border)
        for widget in window.widgets:
            self.widget(widget)

    def widget(self, widget: Widget) -> None:
        match widget:
            case Label():
                self.text(widget.rect.x, widget.rect.center[1], widget.label, self.p.muted if widget.muted else self.p.text)
            case Button():
                self.button(widget)
            case TextField():
                self.field(widget)
            case Checkbox():
                self.checkbox(widget)
            case Slider():
                self.slider(widget)
            case Menu():
                self.menu(widget)
            case Icon():
                self.icon(widget, on_desktop=False)
            case ListBox():
                self.listbox(widget)

    def close_button(self, button: CloseButton) -> None:
        r = button.rect
        self.d.rounded_rectangle(r.corners, radius=max(1, r.w // 5), fill=CLOSE_RED)
        inner = r.inset(max(2, r.w // 4))
        width = max(1, r.w // 8)
        self.d.line(inner.corners, fill=WHITE, width=width)
        self.d.line((inner.x, inner.bottom - 1, inner.right - 1, inner.y), fill=WHITE, width=width)

    def button(self, button: Button) -> None:
        r, p = button.rect, self.p
        window = self.scene.window_of(button)
        is_default = window is not None and window.default is button
        self.d.rounded_rectangle(
            r.corners, radius=max(2, self.m.f // 4), fill=p.button,
            outline=p.accent if is_default else p.border, width=2 * self.line if is_default else self.line,
        )  # fmt: skip
        self.text(*r.center, button.label, p.text, anchor="mm", font=self.m.big if button.big else self.m.font)

    def field(self, field: TextField) -> None:
        r, m, p = field.rect, self.m, self.p
        focused = self.scene.focus is field
        self.d.rectangle(r.corners, fill=p.field, outline=p.accent if focused else p.border, width=2 if focused else 1)
        shown = field.text
        while shown and m.text_w(shown) > r.w - 2 * m.pad:
            shown = shown[1:]  # long text scrolls left, keeping the caret in view
        x, cy = r.x + m.pad // 2 + 2, r.center[1]
        end = x + m.text_w(shown)
        if field.all_selected and shown:
            self.d.rectangle((x, cy - m.f // 2 - 1, end, cy + m.f // 2 + 1), fill=p.accent)
        self.text(x, cy, shown, p.accent_text if field.all_selected else p.text)
        if focused and not field.all_selected:
            self.d.line((end + 1, r.y + 3, end + 1, r.bottom - 4), fill=p.text, width=self.line)

    def checkbox(self, box: Checkbox) -> None:
        r, m, p = box.rect, self.m, self.p
        cy = r.center[1]
        square = Rect(r.x, cy - m.box // 2, m.box, m.box)
        self.d.rectangle(square.corners, fill=p.accent if box.checked else p.field, outline=p.border)
        if box.checked:
            s = square
            tick = [(s.x + s.w * 0.2, s.y + s.h * 0.5), (s.x + s.w * 0.42, s.y + s.h * 0.72), (s.x + s.w * 0.8, s.y + s.h * 0.28)]
            self.d.line(tick, fill=WHITE, width=max(2, m.f // 6))
        self.text(square.right + m.gap, cy, box.label, p.text)

    def slider(self, slider: Slider) -> None:
        r, m, p = slider.rect, self.m, self.p
        cy, half = r.center[1], max(2, m.f // 8)
        knob_x = slider.x_of(slider.value)
        self.d.rectangle((r.x, cy - half, r.right - 1, cy + half), fill=SCROLLBAR, outline=p.border)
        self.d.rectangle((r.x, cy - half, knob_x, cy + half), fill=p.accent)
        kw = max(4, m.f // 2)
        self.d.rounded_rectangle((knob_x - kw // 2, r.y, knob_x + kw // 2, r.bottom - 1), radius=2, fill=WHITE, outline=p.border)
        self.text(r.right + m.gap, cy, str(slider.value), p.text)

    def menu(self, menu: Menu) -> None:
        is_open = self.scene.popup is not None and self.scene.popup.owner is menu
        if is_open:
            self.d.rectangle(menu.rect.corners, fill=self.p.accent)
        self.text(*menu.rect.center, menu.label, self.p.accent_text if is_open else self.p.text, anchor="mm")

    def icon(self, icon: Icon, *, on_desktop: bool) -> None:
        r, m, p = icon.rect, self.m, self.p
        side = m.icon
        glyph = Rect(r.center[0] - side // 2, r.y, side, side)
        getattr(self, f"glyph_{icon.glyph}")(glyph, icon)
        cx, ty = r.center[0], glyph.bottom + m.gap // 2 + m.small.size // 2 + 1
        if icon.selected:
            half = m.text_w(icon.label, m.small) // 2 + 2
            self.d.rectangle((cx - half, ty - m.small.size // 2 - 1, cx + half, ty + m.small.size // 2 + 1), fill=p.accent)
        elif on_desktop:  # a dark outline keeps white labels legible on any wallpaper
            self.text(cx + 1, ty + 1, icon.label, SHADOW, anchor="mm", font=m.small)
        light = icon.selected or on_desktop
        self.text(cx, ty, icon.label, p.accent_text if light else p.text, anchor="mm", font=m.small)

    def glyph_app(self, g: Rect, icon: Icon) -> None:
        self.d.rounded_rectangle(g.corners, radius=g.w // 5, fill=icon.color, outline=SHADOW)
        self.text(*g.center, icon.label[0].upper(), WHITE, anchor="mm", font=self.m.big)

    def glyph_folder(self, g: Rect, icon: Icon) -> None:
        tab = Rect(g.x, g.y + g.h // 8, g.w // 2, g.h // 5)
        self.d.rectangle(tab.corners, fill=icon.color, outline=SHADOW)
        self.d.rectangle((g.x, tab.y + tab.h // 2, g.right - 1, g.bottom - g.h // 8), fill=icon.color, outline=SHADOW)

    def glyph_doc(self, g: Rect, icon: Icon) -> None:
        left, right, fold = g.x + g.w // 6, g.right - g.w // 6, g.w // 4
        page = [(left, g.y), (right - fold, g.y), (right, g.y + fold), (right, g.bottom - 1), (left, g.bottom - 1)]
        self.d.polygon(page, fill=WHITE, outline=SHADOW)
        for i in range(3):
            y = g.y + fold + (i + 1) * g.h // 7
            self.d.line((left + 3, y, right - 4, y), fill=THUMB)
        self.d.rectangle((left, g.bottom - g.h // 4, right, g.bottom - 1), fill=icon.color, outline=SHADOW)

    def listbox(self, box: ListBox) -> None:
        r, m, p = box.rect, self.m, self.p
        self.d.rectangle(r.corners, fill=p.field, outline=p.border)
        for item in box.items[box.offset : box.offset + box.rows]:
            row = box.row_rect(item)
            chosen = item == box.selected
            if chosen:
                self.d.rectangle(row.inset(1).corners, fill=p.accent)
            self.text(row.x + m.pad, row.center[1], item, p.accent_text if chosen else p.text)
        bar = Rect(r.right - box.bar, r.y, box.bar, r.h)
        self.d.rectangle(bar.corners, fill=SCROLLBAR, outline=p.border)
        b = box.bar
        self.d.polygon([(bar.x + 2, r.y + b - 3), (bar.right - 3, r.y + b - 3), (bar.center[0], r.y + 2)], fill=THUMB)
        self.d.polygon([(bar.x + 2, r.bottom - b + 2), (bar.right - 3, r.bottom - b + 2), (bar.center[0], r.bottom - 3)], fill=THUMB)
        track = r.h - 2 * b
        thumb = max(b, track * box.rows // max(1, len(box.items)))
        top = r.y + b + (track - thumb) * box.offset // max(1, box.max_offset)
        self.d.rectangle((bar.x + 2, top, bar.right - 3, top + thumb - 1), fill=THUMB)

    def popup(self, popup: Popup) -> None:
        r, m, p = popup.rect, self.m, self.p
        self.d.rectangle((r.x + 2, r.y + 2, r.right + 1, r.bottom + 1), fill=SHADOW)
        self.d.rectangle(r.corners, fill=p.field, outline=p.border)
        for item in popup.items:
            self.text(r.x + m.pad, popup.item_rect(item).center[1], item, p.text)

    def taskbar(self) -> None:
        m, p, s = self.m, self.p, self.scene
        bar = Rect(0, s.height - m.taskbar, s.width, m.taskbar)
        self.d.rectangle(bar.corners, fill=p.taskbar)
        start = Rect(m.gap, bar.y + 3, bar.h - 6, bar.h - 6)
        self.d.rounded_rectangle(start.corners, radius=start.w // 4, fill=p.accent)
        self.text(bar.right - m.pad, bar.center[1], s.clock, p.taskbar_text, anchor="rm", font=m.small)
