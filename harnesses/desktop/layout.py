"""Placement helpers the families share: windows at random spots sized to their content, content
centred in a window body, grids of equal cells, icon cells, and how many decoys an episode gets."""

from __future__ import annotations

import random

from harnesses.desktop.geometry import Rect
from harnesses.desktop.scene import Scene
from harnesses.desktop.style import Metrics
from harnesses.desktop.widgets import Window


def decoys(rng: random.Random, distractors: int, lo: int, hi: int) -> int:
    """How many decoy widgets: ``lo..hi`` of the family, capped by the ``distractors`` setting."""
    top = min(hi, distractors)
    return rng.randint(min(lo, top), top)


def place_window(
    rng: random.Random, scene: Scene, title: str, inner_w: int, inner_h: int, *, menubar: bool = False,
    area: Rect | None = None,
) -> Window:  # fmt: skip
    """Open a window with room for ``inner_w`` x ``inner_h`` of content (plus padding), a little
    larger at random, somewhere in ``area`` (default: the work area)."""
    m, area = scene.metrics, area or scene.work
    bar = m.row if menubar else 0
    min_w = max(inner_w + 2 * m.pad, m.text_w(title) + m.title + 2 * m.pad)
    min_h = m.title + bar + inner_h + 2 * m.pad
    w = min(area.w, min_w + rng.randint(0, max(0, min_w // 4)))
    h = min(area.h, min_h + rng.randint(0, max(0, min_h // 5)))
    x = rng.randint(area.x, area.right - w)
    y = rng.randint(area.y, area.bottom - h)
    window = Window(title, Rect(x, y, w, h), m.title, menubar=bar)
    scene.windows.append(window)
    return window


def centred(window: Window, w: int, h: int) -> tuple[int, int]:
    """Top-left corner of a ``w`` x ``h`` block centred in the window body."""
    body = window.body
    return body.x + (body.w - w) // 2, body.y + (body.h - h) // 2


def grid(x: int, y: int, n: int, cols: int, cell_w: int, cell_h: int, gap_x: int, gap_y: int) -> list[Rect]:
    """``n`` cells filled row by row from (x, y)."""
    return [Rect(x + (i % cols) * (cell_w + gap_x), y + (i // cols) * (cell_h + gap_y), cell_w, cell_h) for i in range(n)]


def icon_cell(m: Metrics, labels: list[str]) -> tuple[int, int]:
    """Width and height of an icon cell: the picture with the longest label underneath."""
    return max(m.icon, max(m.text_w(label, m.small) for label in labels)) + m.gap, m.icon + m.small.size + 2 * m.gap
