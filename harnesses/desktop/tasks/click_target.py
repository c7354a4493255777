"""click-target: click the named button among two to four big ones (the simplest family: one click)."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.layout import centred, decoys, grid, place_window
from harnesses.desktop.tasks.base import Task, click
from harnesses.desktop.widgets import Button
from harnesses.desktop.words import APPS, BUTTONS


class ClickTarget(Task):
    name = "click-target"

    def build(self, rng: random.Random, distractors: int) -> str:
        m, work = self.scene.metrics, self.scene.work
        labels = rng.sample(BUTTONS, 1 + decoys(rng, distractors, 1, 3))
        n = len(labels)
        bw, bh, gap = max(m.text_w(label, m.big) for label in labels) + 3 * m.f, round(2.6 * m.f), 2 * m.pad

        def size(cols: int) -> tuple[int, int]:
            rows = -(-n // cols)
            return cols * bw + (cols - 1) * gap, rows * bh + (rows - 1) * gap

        def fits(cols: int) -> bool:
            w, h = size(cols)
            return w + 2 * m.pad <= work.w and h + m.title + 2 * m.pad <= work.h

        cols = rng.choice([c for c in sorted({n, 1, 2}) if fits(c)] or [2])  # a row, a column or a 2-wide grid
        w, h = size(cols)
        window = place_window(rng, self.scene, rng.choice(APPS), w, h)
        x, y = centred(window, w, h)
        self.buttons = [window.add(Button(label, rect, big=True)) for label, rect in zip(labels, grid(x, y, n, cols, bw, bh, gap, gap))]
        self.target = rng.choice(self.buttons)
        return f'Click the "{self.target.label}" button.'

    def solved(self) -> bool:
        return self.target.presses > 0

    def failed(self) -> bool:
        return super().failed() or any(b.presses for b in self.buttons if b is not self.target)

    def oracle(self) -> Action:
        return click(self.target)
