"""scroll-find: scroll a list until the named item shows, then click it (it starts out of view)."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.geometry import Rect
from harnesses.desktop.layout import centred, decoys, place_window
from harnesses.desktop.tasks.base import Task
from harnesses.desktop.widgets import ListBox
from harnesses.desktop.words import LISTS


class ScrollFind(Task):
    name = "scroll-find"

    def build(self, rng: random.Random, distractors: int) -> str:
        m, work = self.scene.metrics, self.scene.work
        title, pool = rng.choice(sorted(LISTS.items()))
        items = tuple(sorted(rng.sample(pool, 8 + 3 * decoys(rng, distractors, 1, 4))))
        row_h = round(1.5 * m.f)
        room = (work.h - m.title - 2 * m.pad) // row_h
        rows = min(rng.randint(4, 6), room, len(items) - 2)
        bar = max(8, round(0.9 * m.f))
        w, h = max(m.text_w(item) for item in items) + 3 * m.pad + bar, rows * row_h
        window = place_window(rng, self.scene, title, w, h)
        x, y = centred(window, w, h)
        self.box = window.add(ListBox(title, Rect(x, y, w, h), items, rows=rows, bar=bar))
        self.item = rng.choice(items[rows:])
        return f'Scroll the list to find "{self.item}" and click it.'

    def solved(self) -> bool:
        return self.box.selected == self.item

    def failed(self) -> bool:
        return super().failed() or self.box.selected not in (None, self.item)

    def oracle(self) -> Action:
        box = self.box
        if box.visible(self.item):
            return Action.click(*box.row_rect(self.item).center)
        page = max(1, box.rows - 1)  # a page at a time, keeping one row of context, as people scroll
        up = box.items.index(self.item) < box.offset
        return Action.scroll(*box.row_rect(box.items[box.offset]).center, down=-page if up else page)
