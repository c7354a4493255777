"""tick-boxes: leave exactly the named checkboxes ticked (some start ticked, some named ones not)."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.layout import centred, decoys, grid, place_window
from harnesses.desktop.tasks.base import Task, click_box
from harnesses.desktop.widgets import Checkbox
from harnesses.desktop.words import OPTIONS

TITLES = ("Settings", "Options", "Preferences", "Privacy", "Features")


class TickBoxes(Task):
    name = "tick-boxes"

    def build(self, rng: random.Random, distractors: int) -> str:
        m = self.scene.metrics
        n = 3 + decoys(rng, distractors, 0, 4)
        labels = rng.sample(OPTIONS, n)
        cols = 1 if n <= 4 else 2
        cell_w = m.box + m.gap + max(m.text_w(label) for label in labels)
        w, h = cols * cell_w + (cols - 1) * 2 * m.pad, -(-n // cols) * m.row
        window = place_window(rng, self.scene, rng.choice(TITLES), w, h)
        x, y = centred(window, w, h)
        cells = grid(x, y, n, cols, cell_w, m.row, 2 * m.pad, 0)
        self.boxes = [window.add(Checkbox(label, cell, checked=rng.random() < 0.4)) for label, cell in zip(labels, cells)]
        self.targets = set(rng.sample(self.boxes, rng.randint(1, min(3, n - 1))))
        if self.solved():  # never start solved
            box = rng.choice(self.boxes)
            box.checked = not box.checked
        names = [f'"{box.label}"' for box in self.boxes if box in self.targets]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        return f"Tick exactly {listed} and leave every other box unticked."

    def solved(self) -> bool:
        return all(box.checked == (box in self.targets) for box in self.boxes)

    def oracle(self) -> Action:
        wrong = next((box for box in self.boxes if box.checked != (box in self.targets)), None)
        return Action.done() if wrong is None else click_box(wrong)
