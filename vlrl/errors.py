"""Errors that cross a process boundary whole.

Python pickles an exception as its class and ``args`` and unpickles it by calling the class with
those ``args``. An error whose ``__init__`` takes other arguments than the ones it passes to
``super().__init__`` (``EnvCallError(codebase, call, error)`` passes one message) cannot be
rebuilt that way, so across Ray it arrives as ``UnserializableException`` and its type, message
and fields are lost; one that can be rebuilt still loses the fields it sets itself
(``PackError.payload_lost``). ``PicklesWhole`` rebuilds the error without calling ``__init__``:
the same class, the same ``args`` (so the same message) and the same attributes. Imports nothing
else of vlrl: errors of every layer use it.
"""

from __future__ import annotations

from typing import Any


class PicklesWhole:
    """Mixin for an exception class (put it before the exception base): pickles type, ``args``
    and attributes, and unpickles them without calling ``__init__``."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(vars(self))))


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls, *args)
    error.args = args
    vars(error).update(state)
    return error
