"""close-dialog: close the named dialog with the x in its title bar; its own buttons and closing any
other window do not count. Dialogs cascade so every title bar stays visible."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.geometry import Rect
from harnesses.desktop.layout import decoys, place_window
from harnesses.desktop.tasks.base import Task, click
from harnesses.desktop.widgets import Button, Label, Window
from harnesses.desktop.words import APPS, DIALOGS


class CloseDialog(Task):
    name = "close-dialog"

    def build(self, rng: random.Random, distractors: int) -> str:
        scene, m, work = self.scene, self.scene.metrics, self.scene.work
        app = place_window(rng, scene, rng.choice(APPS), work.w * 3 // 5, work.h // 2)
        app.add(Label("No document open", Rect(app.body.x + m.pad, app.body.y + m.pad, app.body.w - 2 * m.pad, m.row), muted=True))
        specs = rng.sample(DIALOGS, 1 + decoys(rng, distractors, 0, 2))
        size = [self._size(spec) for spec in specs]
        dx, dy = rng.choice((-1, 1)) * 2 * m.f, m.title + m.gap
        span_w = min(work.w, max(w + i * abs(dx) for i, (w, _) in enumerate(size)))
        span_h = min(work.h, max(h + i * dy for i, (_, h) in enumerate(size)))
        x0, y0 = rng.randint(0, work.w - span_w), rng.randint(0, work.h - span_h)
        self.dialogs = []
        for i, ((title, message, buttons), (w, h)) in enumerate(zip(specs, size)):
            x = x0 + (i if dx > 0 else len(specs) - 1 - i) * abs(dx)
            rect = Rect(min(x, work.w - w), min(y0 + i * dy, work.h - h), w, h)
            dialog = Window(title, rect, m.title)
            body = dialog.body
            dialog.add(Label(message, Rect(body.x + m.pad, body.y + m.pad, body.w - 2 * m.pad, m.row)))
            right = rect.right - m.pad
            for label in reversed(buttons):
                bw = m.text_w(label) + 2 * m.f
                dialog.add(Button(label, Rect(right - bw, body.bottom - m.pad - m.row, bw, m.row), closes=True))
                right -= bw + m.gap
            scene.windows.append(dialog)
            self.dialogs.append(dialog)
        self.target = rng.choice(self.dialogs)
        return f'Close the "{self.target.title}" dialog with the x in its title bar.'

    def _size(self, spec: tuple[str, str, tuple[str, ...]]) -> tuple[int, int]:
        m = self.scene.metrics
        title, message, buttons = spec
        buttons_w = sum(m.text_w(label) + 2 * m.f + m.gap for label in buttons)
        w = max(m.text_w(message), buttons_w, m.text_w(title) + m.title) + 2 * m.pad
        return w, m.title + 2 * m.row + m.gap + 2 * m.pad

    def solved(self) -> bool:
        return self.target.closed_by == self.target.close.name

    def failed(self) -> bool:
        return any(window.closed for window in self.scene.windows if window is not self.target) or (
            self.target.closed and not self.solved()
        )

    def oracle(self) -> Action:
        return click(self.target.close)
