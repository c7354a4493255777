"""What a task family provides: a scene built from the seed, the goal in words, the reward check
on widget state, and a scripted next action that solves the episode from wherever it stands."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import ClassVar

from vlrl.harness import Action

from harnesses.desktop.scene import Scene
from harnesses.desktop.widgets import Checkbox, Icon, TextField, Widget


class Task(ABC):
    name: ClassVar[str]

    def __init__(self, rng: random.Random, scene: Scene, distractors: int) -> None:
        self.scene = scene
        self.goal = self.build(rng, distractors)

    @abstractmethod
    def build(self, rng: random.Random, distractors: int) -> str:
        """Populate the empty scene (``distractors`` caps the decoy widgets); return the goal."""

    @abstractmethod
    def solved(self) -> bool:
        """The goal holds in the current widget state."""

    def failed(self) -> bool:
        """The goal can no longer be reached; by default once any window is closed, since every
        family's widgets live in its windows."""
        return any(window.closed for window in self.scene.windows)

    @abstractmethod
    def oracle(self) -> Action:
        """The next action of the scripted policy."""


def click(widget: Widget) -> Action:
    return Action.click(*widget.rect.center)


def click_box(box: Checkbox) -> Action:
    """Click the square of a checkbox rather than its caption, as people do."""
    return Action.click(box.rect.x + box.rect.h // 2 - 1, box.rect.center[1])


def on_icon(scene: Scene, icon: Icon) -> tuple[int, int]:
    """Where people point at an icon: the middle of its picture, not of its label."""
    return icon.rect.center[0], icon.rect.y + scene.metrics.icon // 2


def fill(scene: Scene, field: TextField, value: str) -> Action | None:
    """The next action that makes ``field`` hold ``value`` (None once it does): focus it, select
    wrong text, then type what is missing."""
    if field.text == value:
        return None
    if scene.focus is not field:
        return click(field)
    if field.all_selected:
        return Action.type(value) if value else Action.key("backspace")
    if value.startswith(field.text):
        return Action.type(value[len(field.text) :])
    return Action.key("ctrl", "a")
