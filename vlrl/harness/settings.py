"""Checks of a harness constructor's settings, shared by the codebases: a bad setting fails at
construction, naming the harness, the setting, the value and what was expected."""

from __future__ import annotations

from collections.abc import Sequence


def int_setting(harness: str, name: str, value: object, low: int, high: int) -> int:
    """``value`` if it is an int in ``[low, high]`` (not a bool), else a ``ValueError`` naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{harness} harness setting {name}={value!r}; expected an int in [{low}, {high}]")
    return value


def task_names(harness: str, tasks: object, known: Sequence[str]) -> tuple[str, ...]:
    """``tasks`` as a tuple without repeats, if it is a non-empty sequence of names in ``known``."""
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or not tasks:
        raise ValueError(f"{harness} harness setting tasks={tasks!r}; expected a non-empty tuple of task names")
    unknown = [task for task in tasks if task not in known]
    if unknown:
        raise ValueError(f"{harness} harness setting tasks: unknown {unknown}; valid tasks are {list(known)}")
    return tuple(dict.fromkeys(tasks))
