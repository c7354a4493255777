"""The environment settings of a desktop harness instance, checked when it is built."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harnesses.desktop.tasks import FAMILIES

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
        _check_int("width", self.width, *WIDTH_RANGE)
        _check_int("height", self.height, *HEIGHT_RANGE)
        _check_int("max_steps", self.max_steps, 1, 1000)
        _check_int("distractors", self.distractors, 0, MAX_DISTRACTORS)
        if self.tasks is not None:
            object.__setattr__(self, "tasks", _check_tasks(self.tasks))

    @property
    def families(self) -> tuple[str, ...]:
        """The families a seed draws from."""
        return self.tasks or tuple(FAMILIES)


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"desktop harness setting {name}={value!r}; expected an int in [{low}, {high}]")


def _check_tasks(tasks: object) -> tuple[str, ...]:
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or not tasks:
        raise ValueError(f"desktop harness setting tasks={tasks!r}; expected a non-empty tuple of task names")
    unknown = [t for t in tasks if t not in FAMILIES]
    if unknown:
        raise ValueError(f"desktop harness setting tasks: unknown {unknown}; valid tasks are {list(FAMILIES)}")
    return tuple(dict.fromkeys(tasks))
