"""How big and what colour things are.

``Metrics`` derive every size from one font size that scales with the screen (12 px at 320x240),
so layouts written in font units fit any allowed screen. ``Palette`` is drawn per episode, so the
same task looks different across seeds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from PIL import ImageFont

BASE_SCREEN = (320, 240)
BASE_FONT = 12
MIN_FONT = 7

RGB = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Metrics:
    """Fonts and widget sizes for one screen size; built once per harness instance (FreeType fonts
    are not shared between threads)."""

    font: ImageFont.FreeTypeFont
    big: ImageFont.FreeTypeFont
    """Labels of the big buttons of ``click-target``."""
    small: ImageFont.FreeTypeFont
    """Icon labels and the clock."""
    f: int
    """The font size every other size derives from."""
    row: int
    pad: int
    gap: int
    title: int
    taskbar: int
    box: int
    """Side of a checkbox."""
    icon: int
    """Side of an icon glyph."""

    @classmethod
    def for_screen(cls, width: int, height: int) -> Metrics:
        scale = min(width / BASE_SCREEN[0], height / BASE_SCREEN[1])
        f = max(MIN_FONT, round(BASE_FONT * scale))
        return cls(
            font=ImageFont.load_default(size=f),
            big=ImageFont.load_default(size=round(f * 1.15)),
            small=ImageFont.load_default(size=max(MIN_FONT, round(f * 0.9))),
            f=f,
            row=round(f * 1.7),
            pad=max(3, round(f * 0.6)),
            gap=max(2, round(f * 0.5)),
            title=round(f * 1.6),
            taskbar=round(f * 1.7),
            box=round(f * 1.0),
            icon=round(f * 2.4),
        )

    def text_w(self, text: str, font: ImageFont.FreeTypeFont | None = None) -> int:
        return round((font or self.font).getlength(text))


@dataclass(frozen=True, slots=True)
class Palette:
    desktop: RGB
    taskbar: RGB
    taskbar_text: RGB
    title: RGB
    title_text: RGB
    window: RGB
    border: RGB
    button: RGB
    text: RGB
    muted: RGB
    accent: RGB
    accent_text: RGB
    field: RGB

    @classmethod
    def pick(cls, rng: random.Random) -> Palette:
        """One of the themes, with the wallpaper shade jittered so no two desktops look alike."""
        theme = rng.choice(THEMES)
        desktop = tuple(min(255, max(0, c + rng.randint(-25, 25))) for c in theme.desktop)
        return replace(theme, desktop=desktop)


_LIGHT = dict(
    taskbar_text=(240, 240, 240), title_text=(255, 255, 255), window=(236, 236, 236),
    border=(120, 120, 120), button=(222, 222, 226), text=(20, 20, 20), muted=(130, 130, 130),
    accent_text=(255, 255, 255), field=(255, 255, 255),
)  # fmt: skip
THEMES: tuple[Palette, ...] = (
    Palette(desktop=(58, 110, 165), taskbar=(32, 36, 48), title=(40, 80, 150), accent=(30, 110, 220), **_LIGHT),
    Palette(desktop=(46, 125, 90), taskbar=(28, 40, 34), title=(36, 110, 70), accent=(30, 140, 80), **_LIGHT),
    Palette(desktop=(120, 80, 150), taskbar=(40, 30, 50), title=(100, 60, 140), accent=(130, 70, 200), **_LIGHT),
    Palette(desktop=(170, 100, 60), taskbar=(50, 34, 26), title=(150, 70, 40), accent=(210, 100, 30), **_LIGHT),
    Palette(desktop=(90, 96, 104), taskbar=(24, 24, 28), title=(60, 64, 72), accent=(0, 120, 180), **_LIGHT),
)
