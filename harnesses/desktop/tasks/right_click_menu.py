"""right-click-menu: right-click the named file or folder in a file manager and choose the named
item of its context menu."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.layout import centred, decoys, grid, icon_cell, place_window
from harnesses.desktop.tasks.base import Task, on_icon
from harnesses.desktop.widgets import Icon
from harnesses.desktop.words import COLORS, FILE_ACTIONS, FILES, FOLDER_COLOR, FOLDERS


class RightClickMenu(Task):
    name = "right-click-menu"

    def build(self, rng: random.Random, distractors: int) -> str:
        scene, m = self.scene, self.scene.metrics
        title, *folders = rng.sample(FOLDERS, 3)
        n = 1 + decoys(rng, distractors, 2, 5)
        folders = folders[: rng.randint(0, min(2, n - 1))]  # a file manager lists folders first
        names = folders + rng.sample(FILES, n - len(folders))
        actions = tuple(a for a in FILE_ACTIONS if a in rng.sample(FILE_ACTIONS, rng.randint(4, 6)))
        cell_w, cell_h = icon_cell(m, names)
        cols = max(1, min(n, (scene.work.w - 2 * m.pad) // cell_w, rng.randint(2, 4)))
        w, h = cols * cell_w, -(-n // cols) * cell_h
        window = place_window(rng, scene, title, w, h)
        x, y = centred(window, w, h)
        self.files = []
        for name, cell in zip(names, grid(x, y, n, cols, cell_w, cell_h, 0, 0)):
            look = dict(glyph="folder", color=FOLDER_COLOR) if name in folders else dict(glyph="doc", color=rng.choice(COLORS))
            self.files.append(window.add(Icon(name, cell, menu=actions, **look)))
        self.target = rng.choice(self.files)
        self.action = rng.choice(actions)
        return f'Right-click "{self.target.label}" and choose "{self.action}".'

    def solved(self) -> bool:
        return self.target.chosen == self.action

    def failed(self) -> bool:
        wrong = (f.chosen for f in self.files if f is not self.target or f.chosen != self.action)
        return super().failed() or any(choice is not None for choice in wrong)

    def oracle(self) -> Action:
        popup = self.scene.popup
        if popup is None:
            return Action.right_click(*on_icon(self.scene, self.target))
        if popup.owner is not self.target:
            return Action.key("escape")
        return Action.click(*popup.item_rect(self.action).center)
