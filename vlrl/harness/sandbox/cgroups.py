"""A cgroup per sandbox: its memory and process-count limits, freezing, usage, and the record of
a limit hit, on cgroup v1 (one hierarchy per controller) or v2 (one unified hierarchy).

The group is made under the cgroup of the process that creates it, so the host's own limits
still bound the sandboxes it starts. A process joins by writing ``0`` ("myself") into the
group's ``cgroup.procs`` before it executes the sandbox (``join_files``), so not one fork of the
tree escapes it. Creating groups needs write access to the hierarchy: the bubblewrap backend
makes them on a root node.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_V1 = ("memory", "pids", "freezer")


class CGroup:
    def __init__(self, name: str, *, memory_bytes: int, processes: int) -> None:
        self.v2 = not (ROOT / "memory").is_dir() and (ROOT / "cgroup.controllers").is_file()
        self.paths: dict[str, Path] = {}
        try:
            if self.v2:
                path = ROOT / _own_path("").lstrip("/") / f"vlrl-{name}"
                path.mkdir()
                self.paths = {"memory": path, "pids": path, "freezer": path}
                (path / "memory.max").write_text(str(memory_bytes))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
                (path / "pids.max").write_text(str(processes))
            else:
                for controller in _V1:
                    path = ROOT / controller / _own_path(controller).lstrip("/") / f"vlrl-{name}"
                    path.mkdir()
                    self.paths[controller] = path
                (self.paths["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
                (self.paths["pids"] / "pids.max").write_text(str(processes))
        except OSError:
            self.remove()
            raise
        self._seen = self._events()

    def join_files(self) -> list[str]:
        """The files a process writes ``0`` into to join (every controller's group)."""
        return sorted({str(path / "cgroup.procs") for path in self.paths.values()})

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in set(self.paths.values()):
            try:
                found |= {int(line) for line in (path / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return found

    def memory_bytes(self) -> int:
        name = "memory.current" if self.v2 else "memory.usage_in_bytes"
        return int((self.paths["memory"] / name).read_text())

    def processes(self) -> int:
        return int((self.paths["pids"] / "pids.current").read_text())

    def limit_hit(self) -> tuple[str, str] | None:
        """The first limit hit since the last call, as (limit, detail), or None."""
        now = self._events()
        before, self._seen = self._seen, now
        if now["oom_kill"] > before["oom_kill"]:
            return "memory", f"the kernel killed {now['oom_kill'] - before['oom_kill']} process(es) out of memory"
        if now["pids_max"] > before["pids_max"]:
            return "processes", f"{now['pids_max'] - before['pids_max']} fork(s) refused at the process limit"
        return None

    def freeze(self, frozen: bool, timeout_s: float = 5.0) -> None:
        """Freeze (or thaw) every process of the group; returns once the kernel says it is done
        (a freeze is FREEZING until the last task stops)."""
        path = self.paths["freezer"]
        if self.v2:
            (path / "cgroup.freeze").write_text("1" if frozen else "0")
            done = lambda: _keyed(path / "cgroup.events").get("frozen") == int(frozen)  # noqa: E731
        else:
            (path / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
            done = lambda: (path / "freezer.state").read_text().strip() == ("FROZEN" if frozen else "THAWED")  # noqa: E731
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            time.sleep(0.005)

    def kill_all(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in the group (thawed first: a frozen process cannot die)."""
        try:
            self.freeze(False)
        except OSError:
            pass
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for path in set(self.paths.values()):
            try:
                path.rmdir()
            except OSError:
                pass

    def _events(self) -> dict[str, int]:
        if self.v2:
            memory = _keyed(self.paths["memory"] / "memory.events")
            pids = _keyed(self.paths["pids"] / "pids.events")
        else:
            memory = _keyed(self.paths["memory"] / "memory.oom_control")
            pids = _keyed(self.paths["pids"] / "pids.events")
        return {"oom_kill": memory.get("oom_kill", 0), "pids_max": pids.get("max", 0)}


def sweep_orphans(alive) -> None:
    """Remove the groups ``vlrl-<pid>-...`` of host processes that are gone (``alive(pid)`` False)."""
    parents = {ROOT / _own_path("").lstrip("/")} if not (ROOT / "memory").is_dir() else {
        ROOT / controller / _own_path(controller).lstrip("/") for controller in _V1
    }
    for parent in parents:
        for path in parent.glob("vlrl-*-*"):
            pid = path.name.split("-")[1]
            if pid.isdigit() and not alive(int(pid)):
                try:
                    _kill_pids(path)
                    path.rmdir()
                except OSError:
                    pass


def _kill_pids(path: Path) -> None:
    for line in (path / "cgroup.procs").read_text().split():
        try:
            os.kill(int(line), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _keyed(path: Path) -> dict[str, int]:
    out = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def _own_path(controller: str) -> str:
    """This process's group in ``controller``'s hierarchy ("" for v2's unified one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            return path
    raise OSError(f"this process is in no {controller or 'unified'} cgroup")
