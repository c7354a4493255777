"""Peak memory of a stretch of work in this process, measured where the kernel counts it.

The peak RSS is the kernel's own high-water mark (``VmHWM``), reset to the current RSS by writing
``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0), so it catches every spike, costs nothing while
the work runs, and excludes whatever the process peaked at before (model loading, say). The
kernel keeps no PSS high-water mark: ``PssSampler`` samples ``smaps_rollup`` on a thread, which
walks the page tables (milliseconds on a process of gigabytes), so it belongs around untimed work.
"""

from __future__ import annotations

from pathlib import Path

from vlrl.bench.proc_memory import memory_mb
from vlrl.bench.sampler import Sampler


def reset_peak_rss() -> bool:
    """Restart the high-water mark at the current RSS; False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mb() -> float:
    """The process's peak RSS since the last ``reset_peak_rss`` (or its start), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError("/proc/self/status has no VmHWM line")


class PssSampler(Sampler):
    """``with PssSampler() as s: work()``; then ``s.peak_pss_mb`` is the largest PSS sampled
    every ``period_s`` (and at entry and exit) while the work ran."""

    def __init__(self, period_s: float = 0.1) -> None:
        super().__init__(period_s)
        self.peak_pss_mb = 0.0

    def _sample(self) -> None:
        self.peak_pss_mb = max(self.peak_pss_mb, memory_mb()["pss_mb"])
