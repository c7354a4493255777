"""What a sandbox promises, the limits a harness asks of it, and how it fails.

A harness that runs real programs (an X desktop, a browser) starts them in a sandbox. Backends
differ in what they can contain, so each declares its ``Capabilities`` and a harness names the
ones it needs (``require``): a machine that cannot give them fails at construction, before any
episode starts, with the missing capability and the setting that turns the sandbox off.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from vlrl.errors import PicklesWhole
from vlrl.harness.errors import HarnessError


class SandboxUnavailable(HarnessError):
    """The machine cannot give the sandbox a harness asked for (a tool, a namespace, a cgroup)."""


class SandboxLimitError(PicklesWhole, HarnessError):
    """A program of the sandbox hit one of its limits (memory, processes): the episode ends as a
    failure with this reason and the instance is replaced; the host process goes on."""

    def __init__(self, limit: str, detail: str) -> None:
        super().__init__(f"sandbox {limit} limit hit: {detail}")
        self.limit, self.detail = limit, detail


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend contains. Each flag is a promise checked by the hostile-agent suite."""

    isolates_files: bool
    """Only the system (read-only) and the folders shared with it are visible; nothing outside
    them can be written."""
    isolates_network: bool
    """Its own network namespace: loopback only, none of the host's services reachable."""
    isolates_processes: bool
    """Its own process namespace, an unprivileged uid and no capabilities: nothing outside can
    be seen or signalled."""
    limits_memory: bool
    limits_processes: bool
    limits_disk: bool
    """The shared folders are size-limited file systems: filling them cannot fill the host's disk."""
    can_freeze: bool

    def missing(self, needed: Sequence[str]) -> list[str]:
        return [name for name in needed if not getattr(self, name)]


CAPABILITY_NAMES = tuple(f.name for f in dataclasses.fields(Capabilities))


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Per-instance limits; the kernel enforces them on the whole process tree of the sandbox."""

    memory_mb: int = 1024
    processes: int = 256
    disk_mb: int = 256
    """Size of each shared folder's file system (where ``limits_disk``)."""

    def __post_init__(self) -> None:
        for name, low in (("memory_mb", 64), ("processes", 8), ("disk_mb", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"sandbox limit {name}={value!r}; expected an int >= {low}")


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    memory_bytes: int
    processes: int


class Sandbox(Protocol):
    """One instance's box: a process tree started, entered, frozen, measured and torn down as one.

    Paths keep their meaning on both sides: a shared folder is at the same path inside and out,
    so a harness writes a task's files and reads its results with plain file operations."""

    capabilities: Capabilities
    shared: tuple[Path, ...]

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log: Path, pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen:
        """Start ``argv`` inside, in a process group of its own; its output goes to ``log``."""

    def launcher(self, *, env: Mapping[str, str], cwd: Path) -> list[str]:
        """An argv prefix that runs the rest of the command line inside: for programs that another
        program starts (Playwright starting Chromium)."""

    def host_path(self, inside: str) -> Path:
        """Where the host reaches the sandbox's own ``inside`` path (a socket in its private
        ``/tmp``); the sandbox cannot reach anything of the host's this way."""

    def connect(self, port: int) -> socket.socket:
        """A TCP connection from the host to ``port`` on the sandbox's own loopback (a program's
        debugging port); nothing inside can open one the other way."""

    def own(self, path: Path) -> None:
        """Give ``path`` (in a shared folder, written by the host) to the sandbox's user."""

    def check(self) -> None:
        """Raise ``SandboxLimitError`` if a limit was hit since the last check."""

    def usage(self) -> Usage: ...

    def freeze(self) -> None: ...

    def thaw(self) -> None: ...

    def close(self) -> None:
        """End every process it started, whatever they started in turn, and free its limits."""


def require(harness: str, sandbox: Sandbox, needed: Sequence[str], wanted: Sequence[str] = ()) -> None:
    """Refuse a sandbox that lacks a ``needed`` capability, naming it; warn once a process about a
    ``wanted`` one (limits need a root node, or a delegated cgroup, that an isolating sandbox may not have)."""
    missing = sandbox.capabilities.missing(needed)
    if missing:
        raise SandboxUnavailable(
            f"the {harness} harness needs a sandbox that {', '.join(missing)}; this one does not "
            f"({type(sandbox).__name__}). Set sandbox='none' in the harness settings to run without one."
        )
    lacking = sandbox.capabilities.missing(wanted)
    if lacking and (harness, tuple(lacking)) not in _warned:
        _warned.add((harness, tuple(lacking)))
        logging.getLogger("vlrl").warning(
            "%s harness: this node's sandbox does not %s (it needs root for cgroups and tmpfs mounts): "
            "a fork bomb, a memory hog or a full disk inside reaches the node's own limits", harness, ", ".join(lacking)
        )


_warned: set[tuple[str, tuple[str, ...]]] = set()
