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
