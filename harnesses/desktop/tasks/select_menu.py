"""select-menu: open the named menu of a window's menu bar and choose the named item."""

from __future__ import annotations

import random

from vlrl.harness import Action

from harnesses.desktop.geometry import Rect
from harnesses.desktop.layout import decoys, place_window
from harnesses.desktop.tasks.base import Task, click
from harnesses.desktop.widgets import Label, Menu
from harnesses.desktop.words import APPS, MENUS


class SelectMenu(Task):
    name = "select-menu"

    def build(self, rng: random.Random, distractors: int) -> str:
        m = self.scene.metrics
        titles = sorted(rng.sample(list(MENUS), 2 + decoys(rng, distractors, 0, 2)), key=list(MENUS).index)
        widths = [m.text_w(title) + 2 * m.pad for title in titles]
        app = rng.choice(APPS)
        window = place_window(rng, self.scene, app, max(sum(widths), 14 * m.f), 5 * m.f, menubar=True)
        x = window.rect.x + 1
        self.menus = []
        for title, w in zip(titles, widths):
            pool = MENUS[title]
            items = tuple(pool[i] for i in sorted(rng.sample(range(len(pool)), rng.randint(3, min(5, len(pool))))))
            self.menus.append(window.add(Menu(title, Rect(x, window.rect.y + window.title_h, w, window.menubar), items)))
            x += w
        body = window.body
        window.add(Label(f"Untitled - {app}", Rect(body.x + m.pad, body.y + m.pad, body.w - 2 * m.pad, m.row), muted=True))
        self.menu = rng.choice(self.menus)
        self.item = rng.choice(self.menu.items)
        return f'Choose "{self.item}" from the {self.menu.label} menu.'

    def solved(self) -> bool:
        return self.menu.chosen == self.item

    def failed(self) -> bool:
        wrong = (menu.chosen for menu in self.menus if menu is not self.menu or menu.chosen != self.item)
        return super().failed() or any(choice is not None for choice in wrong)

    def oracle(self) -> Action:
        popup = self.scene.popup
        if popup is None:
            return click(self.menu)
        if popup.owner is not self.menu:
            return Action.key("escape")
        return Action.click(*popup.item_rect(self.item).center)
