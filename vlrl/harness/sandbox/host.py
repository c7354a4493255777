"""``sandbox='none'``: the instance's programs run on the host, as the host's user, with its files,
processes and network. For machines that cannot make a sandbox and for debugging; a run that
chooses it says so once (``warn_unsandboxed``)."""

from __future__ import annotations

import ctypes
import logging
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from vlrl.harness.sandbox.spec import Capabilities, SandboxUnavailable, Usage

NO_CAPABILITIES = Capabilities(
    isolates_files=False, isolates_network=False, isolates_processes=False,
    limits_memory=False, limits_processes=False, limits_disk=False, can_freeze=False,
)  # fmt: skip
_PR_SET_PDEATHSIG = 1
_warned: set[str] = set()


def warn_unsandboxed(harness: str) -> None:
    """One line per process and harness: what running without a sandbox exposes."""
    if harness in _warned:
        return
    _warned.add(harness)
    logging.getLogger("vlrl").warning(
        "%s harness: sandbox='none': the policy's actions reach programs that run on this node as its user, "
        "with its files, processes and network (a typed command line runs as that user)", harness
    )


class HostProcesses:
    capabilities = NO_CAPABILITIES

    def __init__(self, name: str, *, shared: Sequence[Path] = ()) -> None:
        self.name = name
        self.shared = tuple(Path(p) for p in shared)
        for folder in self.shared:
            folder.mkdir(parents=True, exist_ok=True)

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log: Path, pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen:
        with open(log, "ab") as out:
            return subprocess.Popen(
                list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                pass_fds=pass_fds, start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip

    def launcher(self, *, env: Mapping[str, str], cwd: Path) -> list[str]:
        return ["env", "-i", *(f"{k}={v}" for k, v in env.items())]

    def host_path(self, inside: str) -> Path:
        return Path(inside)

    def connect(self, port: int) -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=10)

    def own(self, path: Path) -> None:
        pass

    def check(self) -> None:
        pass

    def usage(self) -> Usage:
        raise SandboxUnavailable("sandbox='none' measures nothing")

    def freeze(self) -> None:
        raise SandboxUnavailable("sandbox='none' cannot freeze")

    def thaw(self) -> None:
        raise SandboxUnavailable("sandbox='none' cannot thaw")

    def close(self) -> None:
        pass


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
