"""Checks of a harness constructor's settings, shared by the codebases: a bad setting fails at
construction, naming the harness, the setting, the value and what was expected."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any


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


def declared_int_default(factory: Callable[..., Any], name: str) -> int | None:
    """The int default a harness declares for setting ``name``: a keyword of its constructor, else a
    field of its ``Config`` dataclass (a constructor taking ``**settings``); None when neither."""
    try:
        parameter = inspect.signature(factory).parameters.get(name)
    except (TypeError, ValueError):  # a builtin or C factory: nothing declared
        parameter = None
    default = parameter.default if parameter is not None else None
    config = getattr(factory, "Config", None)
    if parameter is None and dataclasses.is_dataclass(config):
        default = {f.name: f.default for f in dataclasses.fields(config)}.get(name)
    return default if isinstance(default, int) and not isinstance(default, bool) else None
