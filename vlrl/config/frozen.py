"""Frozen copies of config trees: what a resolved run plan holds (``vlrl.job.run_plan``).

Configs are mutable while a recipe and ``--set`` shape them. Once a run's plan is made, nothing
may change a setting in it: ``freeze`` copies a config tree into instances of frozen twins of
its classes (the same fields, methods, ``isinstance`` and docs; equal to their mutable
originals), its lists into tuples and its dicts into ``FrozenDict``. Setting a field of a frozen
config raises ``dataclasses.FrozenInstanceError`` naming it; ``dataclasses.replace`` still
derives a new (frozen) config. Frozen configs pickle, so Ray ships them to the ranks as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NoReturn

_TWINS: dict[type, type] = {}


class FrozenDict(dict):
    """A dict that refuses changes (a frozen config's dict field); pickles as itself."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a frozen config's dict cannot change; change the config the plan is made from")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


def freeze(value: Any) -> Any:
    """``value`` with every config in it replaced by a frozen copy, lists by tuples and dicts by
    ``FrozenDict``; anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value) in _TWINS.values():
            return value
        return _frozen(type(value), {f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    if isinstance(value, dict) and not isinstance(value, FrozenDict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    return value


def is_frozen(value: Any) -> bool:
    """Whether ``value`` is a config ``freeze`` made."""
    return type(value) in _TWINS.values()


def _frozen(cls: type, values: dict[str, Any]) -> Any:
    twin = _twin(cls)
    out = object.__new__(twin)
    for name, value in values.items():
        object.__setattr__(out, name, freeze(value))
    return out


def _twin(cls: type) -> type:
    """The frozen subclass of the config class ``cls``, made once."""
    if cls in _TWINS:
        return _TWINS[cls]
    fields = tuple(f.name for f in dataclasses.fields(cls))

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # dataclasses.replace: a new frozen config
        made = cls(*args, **kwargs)
        for name in fields:
            object.__setattr__(self, name, freeze(getattr(made, name)))

    def __setattr__(self: Any, name: str, value: Any) -> NoReturn:
        raise dataclasses.FrozenInstanceError(
            f"cannot set {cls.__qualname__}.{name}: it belongs to a resolved run plan, made before anything"
            " started; set it on the config the plan is made from (a recipe or --set)"
        )

    def __delattr__(self: Any, name: str) -> NoReturn:
        __setattr__(self, name, None)

    def __eq__(self: Any, other: object) -> bool:
        if not isinstance(other, cls):
            return NotImplemented
        return all(getattr(self, name) == freeze(getattr(other, name)) for name in fields)

    def __reduce__(self: Any) -> tuple[Any, ...]:
        return (_frozen, (cls, {name: getattr(self, name) for name in fields}))

    body = {
        "__slots__": (), "__init__": __init__, "__setattr__": __setattr__, "__delattr__": __delattr__,
        "__eq__": __eq__, "__hash__": cls.__hash__, "__reduce__": __reduce__,
        # the original's names: its source (field docs, inspect) and its name in messages and printouts
        "__module__": cls.__module__, "__qualname__": cls.__qualname__,
    }  # fmt: skip
    _TWINS[cls] = twin = type(cls.__name__, (cls,), body)
    return twin
