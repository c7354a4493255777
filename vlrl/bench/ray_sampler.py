"""Samples, from /proc, the descriptors, memory and count of the Ray processes this process
started while a benchmark runs (another Ray on the machine is never counted)."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from pathlib import Path


class RaySampler:
    """Samples descriptors and memory of Ray's processes from /proc while a run goes on."""

    def __init__(self, period_s: float = 0.2) -> None:
        self._period = period_s
        self._stop = threading.Event()
        self.peak = {"gcs_fds": 0, "total_fds": 0, "rss_mb": 0.0, "processes": 0}
        self.cpu_s = 0.0
        """CPU seconds the sampling thread used (it runs in the driver, whose CPU a run counts)."""
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RaySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.thread_time()
            sample = ray_processes()
            for key, value in sample.items():
                self.peak[key] = max(self.peak[key], value)
            self.cpu_s += time.thread_time() - started
            self._stop.wait(self._period)


def ray_processes() -> dict[str, float]:
    """Descriptors, memory and count of the Ray processes this process started (its GCS, raylet
    and workers: its descendants), so another Ray on the machine is never counted."""
    status: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                status[int(proc.name)] = (proc / "status").read_text()
            except (FileNotFoundError, PermissionError, ProcessLookupError):
                continue
    children: dict[int, list[int]] = defaultdict(list)
    for pid, text in status.items():
        children[next((int(line.split()[1]) for line in text.splitlines() if line.startswith("PPid:")), 0)].append(pid)
    gcs_fds = total_fds = processes = rss = 0
    stack = list(children[os.getpid()])
    while stack:
        pid = stack.pop()
        stack.extend(children[pid])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        rss += next((int(line.split()[1]) for line in status[pid].splitlines() if line.startswith("VmRSS:")), 0)
        total_fds += fds
        processes += 1
        if cmdline[0].endswith(b"gcs_server"):
            gcs_fds = fds
    return {"gcs_fds": gcs_fds, "total_fds": total_fds, "rss_mb": rss / 1024, "processes": processes}
