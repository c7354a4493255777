"""double-click-icon: open the named app by double-clicking its desktop icon (a single click only
selects it; opening another app fails)."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.geometry import Rect
from harnesses.desktop.layout import decoys, icon_cell
from harnesses.desktop.tasks.base import Task, on_icon
from harnesses.desktop.widgets import Icon
from harnesses.desktop.words import APPS, COLORS


class DoubleClickIcon(Task):
    name = "double-click-icon"

    def build(self, rng: random.Random, distractors: int) -> str:
        scene, m = self.scene, self.scene.metrics
        labels = rng.sample(APPS, 1 + decoys(rng, distractors, 2, 5))
        cell_w, cell_h = icon_cell(m, labels)
        cols, rows = scene.work.w // cell_w, scene.work.h // cell_h
        cells = rng.sample(range(cols * rows), len(labels))  # desktop icons snap to a grid
        margin_x, margin_y = (scene.work.w - cols * cell_w) // 2, (scene.work.h - rows * cell_h) // 2
        for label, cell, color in zip(labels, cells, rng.sample(COLORS, len(labels))):
            rect = Rect(margin_x + cell % cols * cell_w, margin_y + cell // cols * cell_h, cell_w, cell_h - m.gap)
            scene.icons.append(Icon(label, rect, glyph="app", color=color))
        self.target = rng.choice(scene.icons)
        return f'Open "{self.target.label}" by double-clicking its icon.'

    def solved(self) -> bool:
        return self.target.opened

    def failed(self) -> bool:
        return any(icon.opened for icon in self.scene.icons if icon is not self.target)

    def oracle(self) -> Action:
        return Action.double_click(*on_icon(self.scene, self.target))
