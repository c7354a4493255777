"""The environment settings of a desktop harness instance, checked when it is built."""

from __future__ import annotations

from dataclasses import dataclass

from harnesses.desktop.tasks import FAMILIES
from vlrl.harness import int_setting, task_names

WIDTH_RANGE = (160, 1920)
HEIGHT_RANGE = (120, 1080)
MAX_DISTRACTORS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class DesktopSettings:
    """What a data source fixes for every instance of its env pool; tasks vary per ``reset``."""

    width: int = 320
    """Screenshot width in pixels; widgets and fonts scale with the screen."""
    height: int = 240
    """Screenshot height in pixels."""
    tasks: tuple[str, ...] | None = None
    """Families an episode is drawn from when ``reset`` names none; None: every family."""
    max_steps: int = 10
    """Steps before an episode is truncated."""
    distractors: int = 3
    """Most decoy widgets beside the targets (other buttons, fields, icons...); 0 makes every
    family as easy as it gets, for curricula."""

    def __post_init__(self) -> None:
        int_setting("desktop", "width", self.width, *WIDTH_RANGE)
        int_setting("desktop", "height", self.height, *HEIGHT_RANGE)
        int_setting("desktop", "max_steps", self.max_steps, 1, 1000)
        int_setting("desktop", "distractors", self.distractors, 0, MAX_DISTRACTORS)
        if self.tasks is not None:
            object.__setattr__(self, "tasks", task_names("desktop", self.tasks, tuple(FAMILIES)))

    @property
    def families(self) -> tuple[str, ...]:
        """The families a seed draws from."""
        return self.tasks or tuple(FAMILIES)

