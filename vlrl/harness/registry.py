"""Harness codebases by id: registered explicitly or found through the ``vlrl.harnesses`` entry
point group, resolved and checked when first made (never an unchecked dotted path at run time)."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from vlrl.harness.base import Harness
from vlrl.harness.errors import HarnessError

ENTRY_POINT_GROUP = "vlrl.harnesses"

_lock = threading.Lock()
_factories: dict[str, Callable[..., Harness] | str] = {}


def register(harness_id: str, entry_point: Callable[..., Harness] | str) -> None:
    """Register a harness class/factory, or a ``"module:attr"`` path resolved on first use."""
    if not isinstance(harness_id, str) or not harness_id:
        raise HarnessError(f"harness id must be a non-empty string, got {harness_id!r}")
    if isinstance(entry_point, str) and ":" not in entry_point:
        raise HarnessError(f"harness {harness_id!r}: entry point {entry_point!r}; expected 'module:attribute'")
    with _lock:
        _factories[harness_id] = entry_point


def registered() -> list[str]:
    """Ids registered explicitly or installed as entry points."""
    with _lock:
        known = set(_factories)
    return sorted(known | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def resolve(harness_id: str) -> Callable[..., Harness]:
    with _lock:
        target = _factories.get(harness_id)
    if target is None:
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == harness_id]
        if not found:
            raise HarnessError(f"harness {harness_id!r} is not registered; known: {registered()}")
        target = found[0].value
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as error:
            raise HarnessError(f"harness {harness_id!r}: cannot load {module_name}:{attr}: {error}") from error
        with _lock:
            _factories[harness_id] = target
    if not callable(target):
        raise HarnessError(f"harness {harness_id!r}: {target!r} is not callable")
    return target


def make(harness_id: str, **settings: Any) -> Harness:
    """Build one harness instance with the given environment settings."""
    harness = resolve(harness_id)(**settings)
    if not isinstance(harness, Harness):
        raise HarnessError(f"harness {harness_id!r} built a {type(harness).__name__}, not a vlrl Harness")
    return harness
