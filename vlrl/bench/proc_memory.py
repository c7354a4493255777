"""A process's memory as the kernel counts it: RSS, and PSS (shared pages split among the
processes mapping them), so that N processes sharing one segment are not counted N times."""

from __future__ import annotations

import os
from pathlib import Path

_FIELDS = {"Rss": "rss_mb", "Pss": "pss_mb", "Pss_Anon": "pss_anon_mb", "Pss_Shmem": "pss_shmem_mb"}


def memory_mb(pid: int | None = None) -> dict[str, float]:
    """``{rss_mb, pss_mb, pss_anon_mb, pss_shmem_mb}`` of process ``pid`` (this one by default),
    from ``/proc/PID/smaps_rollup`` (Linux >= 4.14); fields the kernel does not report are 0."""
    text = Path(f"/proc/{pid or os.getpid()}/smaps_rollup").read_text()
    out = dict.fromkeys(_FIELDS.values(), 0.0)
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in _FIELDS:
            out[_FIELDS[name]] = int(rest.split()[0]) / 1024  # kB
    return out


def tree_memory_mb(pids: list[int], field: str = "pss_mb") -> float:
    """``field`` of ``memory_mb`` summed over ``pids`` and every process they started (a sandbox's
    programs are children of the ``nsenter`` that entered them); processes gone meanwhile count 0."""
    total = 0.0
    for pid in _tree(pids):
        try:
            total += memory_mb(pid)[field]
        except OSError:
            pass
    return total


def tree_uids(pids: list[int]) -> set[int]:
    """The real uids of ``pids`` and every process they started."""
    import psutil

    uids = set()
    for pid in _tree(pids):
        try:
            uids.add(psutil.Process(pid).uids().real)
        except psutil.NoSuchProcess:
            pass
    return uids


def _tree(pids: list[int]) -> set[int]:
    import psutil

    tree: set[int] = set()
    for pid in pids:
        try:
            tree |= {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
        except psutil.NoSuchProcess:
            pass
    return tree
