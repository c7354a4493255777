"""Sandboxes for harness instances that run real programs (``spec`` says what one promises).

``open_sandbox`` is what a harness calls: ``"bubblewrap"`` (the default, namespaces and cgroups)
or ``"none"`` (the host itself, with one warning). A remote or container backend implements the
``Sandbox`` protocol and is passed by name the same way (docs/harnesses.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vlrl.harness.sandbox.spec import (
    CAPABILITY_NAMES,
    Capabilities,
    Limits,
    Sandbox,
    SandboxLimitError,
    SandboxUnavailable,
    Usage,
    require,
)

SANDBOX_KINDS = ("bubblewrap", "none")

__all__ = [
    "CAPABILITY_NAMES", "SANDBOX_KINDS", "Capabilities", "Limits", "Sandbox", "SandboxLimitError",
    "SandboxUnavailable", "Usage", "check_available", "limits_setting", "open_sandbox", "require", "sandbox_setting",
]  # fmt: skip


def sandbox_setting(harness: str, value: object) -> str:
    if value not in SANDBOX_KINDS:
        raise ValueError(f"{harness} harness setting sandbox={value!r}; expected one of {list(SANDBOX_KINDS)}")
    return value  # type: ignore[return-value]


def limits_setting(harness: str, *, memory_mb: object, processes: object, disk_mb: object) -> Limits:
    """The harness settings ``sandbox_memory_mb``, ``sandbox_processes``, ``sandbox_disk_mb`` as
    ``Limits``, or a ``ValueError`` naming the setting."""
    from vlrl.harness.settings import int_setting

    return Limits(
        memory_mb=int_setting(harness, "sandbox_memory_mb", memory_mb, 64, 1 << 22),
        processes=int_setting(harness, "sandbox_processes", processes, 8, 1 << 22),
        disk_mb=int_setting(harness, "sandbox_disk_mb", disk_mb, 1, 1 << 22),
    )


def check_available(harness: str, kind: str) -> None:
    """Fail now, naming what is missing and the setting that turns the sandbox off, when this
    machine cannot make a ``kind`` sandbox (cheap: one probe a process)."""
    if kind == "none":
        from vlrl.harness.sandbox.host import warn_unsandboxed

        warn_unsandboxed(harness)
        return
    from vlrl.harness.sandbox.bubblewrap import unavailable

    problem = unavailable()
    if problem:
        raise SandboxUnavailable(
            f"the {harness} harness runs its programs in a bubblewrap sandbox, and this machine cannot make one: "
            f"{problem}. Install what is missing, or set the harness setting sandbox='none' "
            "(the policy's actions then run on this node)"
        )


def open_sandbox(
    kind: str,
    name: str,
    *,
    shared: Sequence[Path] = (),
    readonly: Sequence[Path] = (),
    limits: Limits = Limits(),
) -> Sandbox:
    """A ``kind`` sandbox named ``name`` (unique on the machine; it starts with the host's pid),
    sharing the host folders ``shared`` read-write and ``readonly`` read-only, at their paths."""
    if kind == "none":
        from vlrl.harness.sandbox.host import HostProcesses

        return HostProcesses(name, shared=shared)
    from vlrl.harness.sandbox.bubblewrap import BubblewrapSandbox

    return BubblewrapSandbox(name, shared=shared, readonly=readonly, limits=limits)
