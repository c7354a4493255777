"""CPU seconds each test costs: the pytest process and every process under it (its Ray's workers,
a benchmark's subprocess and that subprocess's Ray, Chromium, Xvfb), read from ``/proc``.

A test's wall time depends on what else the machine runs (inside a whole-suite run a test takes
2-3 times its time alone); its CPU seconds hardly do. CI's time is the suite's CPU seconds over
the cores, so this is the figure to budget a test by. Every run prints its costliest tests
beside pytest's slowest.

A sampler thread reads the process tree every ``PERIOD_S`` and keeps each process's last reading,
so a process that ends within a test still counts, less its CPU after its last reading (at most
``PERIOD_S`` of it) and a process that lives under ``PERIOD_S`` may not count at all: the figure
is a slight undercount.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

PERIOD_S = 0.5
SHOWN = 30
_TICK = os.sysconf("SC_CLK_TCK")
_KEY = "cpu_s"
_START = pytest.StashKey[dict]()


class TreeSampler:
    """Last CPU seconds (user + system) seen of every process under ``root``, by (pid, start time)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[tuple[int, int], float] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="cpu-cost", daemon=True).start()

    def sample(self) -> dict[tuple[int, int], float]:
        """Reads the tree now; a copy of every reading kept so far."""
        parents, cpu = {}, {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                data = _read(f"/proc/{entry.name}/stat")
            except OSError:  # it ended while we looked
                continue
            fields = data[data.rindex(b")") + 2 :].split()  # the name may hold spaces; after it, state is field 0
            pid = int(entry.name)
            parents.setdefault(int(fields[1]), []).append(pid)
            cpu[pid] = ((int(fields[11]) + int(fields[12])) / _TICK, int(fields[19]))
        tree, stack = [], [self.root]
        while stack:
            pid = stack.pop()
            tree.append(pid)
            stack.extend(parents.get(pid, ()))
        with self._lock:
            for pid in tree:
                if pid in cpu:
                    seconds, started = cpu[pid]
                    self.seen[(pid, started)] = seconds
            return dict(self.seen)

    def _run(self) -> None:
        while True:
            time.sleep(PERIOD_S)
            self.sample()


def _read(path: str) -> bytes:
    """A file's bytes through ``os`` calls: a test may patch ``builtins.open`` to catch code that
    opens files (the parsers' property tests do), and this thread runs beside it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


_sampler: TreeSampler | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _sampler
    if _sampler is None:
        _sampler = TreeSampler(os.getpid())
    item.stash[_START] = _sampler.sample()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and _START in item.stash:
        start, end = item.stash[_START], _sampler.sample()
        spent = sum(seconds - start.get(key, 0.0) for key, seconds in end.items())
        outcome.get_result().user_properties.append((_KEY, round(spent, 2)))


def pytest_terminal_summary(terminalreporter):
    costs = [
        (dict(report.user_properties)[_KEY], report.nodeid)
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "teardown" and _KEY in dict(getattr(report, "user_properties", ()))
    ]
    if not costs:
        return
    costs.sort(reverse=True)
    terminalreporter.write_sep("=", f"costliest {min(SHOWN, len(costs))} tests in CPU seconds (the test's process tree)")
    for seconds, nodeid in costs[:SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f} cpu-s  {nodeid}")
    terminalreporter.write_line(f"{sum(c for c, _ in costs):8.1f} cpu-s  all {len(costs)} tests")
