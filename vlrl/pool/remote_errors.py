"""Errors of remote calls as a user should read them: whole, named, without terminal colours.

Ray hands a remote exception back as a ``RayTaskError`` whose text is the remote traceback with
ANSI colour codes; summaries that keep its first line show ``RayTaskError(TypeError):
ray::EnvHost.open() (pid=..., ip=...`` and nothing of the cause. ``describe`` gives the cause's
type and message instead, and ``EnvCallError`` adds which harness codebase and which env-host
call raised it.
"""

from __future__ import annotations

import re

from ray.exceptions import RayTaskError

from vlrl.errors import PicklesWhole
from vlrl.harness import HarnessError

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cause_of(error: BaseException) -> BaseException:
    """The exception the remote code raised (``error`` itself when it is not a Ray wrapper)."""
    while isinstance(error, RayTaskError) and isinstance(error.cause, BaseException):
        error = error.cause
    return error


def describe(error: BaseException) -> str:
    """``Type: message`` of the remote cause, colour codes removed, nothing cut."""
    cause = cause_of(error)
    return _ANSI.sub("", f"{type(cause).__name__}: {cause}")


class EnvCallError(PicklesWhole, HarnessError):
    """A harness instance's call on its env host raised: names the codebase, the call and the
    cause's type and whole message."""

    def __init__(self, codebase: str, call: str, error: BaseException) -> None:
        super().__init__(f"harness {codebase!r}: EnvHost.{call} raised {describe(error)}")
        self.codebase = codebase
        self.call = call
        self.cause = cause_of(error)
