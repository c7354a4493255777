"""CPU seconds of one run's own processes, from ``/proc``: this process and its descendants (the
Ray it started: GCS, raylet, workers, actors).

Machine-wide busy time (``cpu_meter``) also counts whatever else the machine runs; a run's own
processes are counted apart from it. Two snapshots around a timed section give what each process
computed in it (``cpu_between``); a process that exits inside the section loses what it computed
since the first snapshot, so the section ends before its actors are killed.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int | None = None) -> dict[int, float]:
    """User + system CPU seconds of ``root`` (default: this process) and of every descendant alive now, by pid."""
    root = os.getpid() if root is None else root
    parent_of: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        # fields after the command name, which may hold spaces: state ppid ... utime(12th) stime(13th)
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(proc.name)
        parent_of[pid] = int(fields[1])
        seconds[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in parent_of.items():
        children[parent].append(pid)
    tree, stack = {}, [root]
    while stack:
        pid = stack.pop()
        if pid in seconds:
            tree[pid] = seconds[pid]
        stack.extend(children[pid])
    return tree


def cpu_between(before: dict[int, float], after: dict[int, float]) -> dict[int, float]:
    """CPU seconds each process of ``after`` computed since ``before`` (all of it for a process
    that started in between)."""
    return {pid: seconds - before.get(pid, 0.0) for pid, seconds in after.items()}
