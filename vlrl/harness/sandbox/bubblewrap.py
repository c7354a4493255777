"""The embedded sandbox: Linux namespaces through bubblewrap, limits through cgroups, no daemon.

One ``bwrap`` process per instance holds the namespaces (user, mount, pid, ipc, uts, network,
cgroup) with a placeholder process in them; every program of the instance is entered into them
with ``nsenter`` (``spawn``, ``launcher``). Inside: the system folders read-only, a private
``/tmp``, ``/proc`` and ``/dev``, the shared folders read-write at their host paths, nothing
else of the host (no ``/root``, ``/home``, checkout or run folder); network namespace with
loopback only; uid 65534 (``nobody``) with no capabilities and ``no_new_privs``, so no setuid
program raises it. When the host runs as root, the namespaces belong to that unprivileged uid
too (files the sandbox writes are owned by 65534 on the host, and host files owned by root stay
unreadable where their mode says so), and every process joins the instance's cgroup before it
executes, so the memory and process limits cover the whole tree and ``close`` kills all of it.
Where the host is root, each shared folder is a tmpfs of ``Limits.disk_mb``: filling it fills
memory the cgroup counts, never the host's disk.

The kernel is shared: a kernel exploit escapes. A VM or a remote sandbox behind the same
``Sandbox`` protocol is stronger (docs/harnesses.md).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from vlrl.harness.sandbox import cgroups
from vlrl.harness.sandbox.processes import alive, kill_group
from vlrl.harness.sandbox.spec import Capabilities, Limits, SandboxLimitError, SandboxUnavailable, Usage

SANDBOX_UID = 65534
"""``nobody``: the uid (and gid) of every sandboxed process, inside and, for a root host, outside."""
START_TIMEOUT_S = 10.0
_SYSTEM = ("/usr", "/etc", "/var/cache/fontconfig")
_MERGED = ("/bin", "/sbin", "/lib", "/lib64", "/lib32")
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWNET = 0x40000000
_NAMESPACES = ("--unshare-all", "--die-with-parent", "--new-session")


class BubblewrapSandbox:
    def __init__(
        self,
        name: str,
        *,
        shared: Sequence[Path] = (),
        readonly: Sequence[Path] = (),
        limits: Limits = Limits(),
    ) -> None:
        problem = unavailable()
        if problem:
            raise SandboxUnavailable(problem)
        self.name = name
        self.limits = limits
        self.shared = tuple(Path(p) for p in shared)
        self.readonly = tuple(Path(p) for p in readonly)
        self._root = os.geteuid() == 0
        self._mounts: list[Path] = []
        self._cgroup: cgroups.CGroup | None = None
        self._closed = False
        self.capabilities = Capabilities(
            isolates_files=True, isolates_network=True, isolates_processes=True,
            limits_memory=self._root, limits_processes=self._root, limits_disk=self._root, can_freeze=self._root,
        )  # fmt: skip
        try:
            if self._root:
                cgroups.sweep_orphans(alive)
                self._cgroup = cgroups.CGroup(name, memory_bytes=limits.memory_mb << 20, processes=limits.processes)
            for folder in self.shared:
                folder.mkdir(parents=True, exist_ok=True)
                if self._root:
                    _mount_tmpfs(folder, limits.disk_mb)
                    self._mounts.append(folder)
                self.own(folder)
            self._holder, self.pid = self._start()
        except BaseException:
            self.close()
            raise

    # -- the Sandbox protocol

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log: Path, pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen:
        with open(log, "ab") as out:
            return subprocess.Popen(
                [*self._enter(cwd), *argv],
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=pass_fds,
                start_new_session=True,
                preexec_fn=self._preexec_entering,
            )

    def launcher(self, *, env: Mapping[str, str], cwd: Path) -> list[str]:
        joins = "".join(f"echo 0 > {f}; " for f in (self._cgroup.join_files() if self._cgroup else ()))
        environment = ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
        return ["sh", "-c", f'{joins}exec "$@"', "sh", "setpriv", "--no-new-privs", *self._enter(cwd), *environment]

    def host_path(self, inside: str) -> Path:
        return Path(f"/proc/{self.pid}/root") / inside.lstrip("/")

    def connect(self, port: int) -> socket.socket:
        """A TCP connection to ``port`` on the sandbox's own loopback: this thread enters its
        network namespace (``setns`` applies to the calling thread only), connects, and returns."""
        libc = ctypes.CDLL(None, use_errno=True)
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        inside = os.open(f"/proc/{self.pid}/ns/net", os.O_RDONLY)
        try:
            if libc.setns(inside, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"cannot enter the network namespace of sandbox {self.name}")
            try:
                connection = socket.create_connection(("127.0.0.1", port), timeout=10)
            finally:
                if libc.setns(home, _CLONE_NEWNET) != 0:  # a thread left inside would be a leak: fail loudly
                    raise RuntimeError(f"cannot return to the host's network namespace: errno {ctypes.get_errno()}")
            connection.settimeout(None)
            return connection
        finally:
            os.close(home)
            os.close(inside)

    def own(self, path: Path) -> None:
        if not self._root:
            return
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
        for parent, folders, files in os.walk(path):
            for entry in (*folders, *files):
                os.chown(os.path.join(parent, entry), SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)

    def check(self) -> None:
        hit = self._cgroup.limit_hit() if self._cgroup else None
        if hit:
            raise SandboxLimitError(*hit)

    def usage(self) -> Usage:
        if self._cgroup is None:
            raise SandboxUnavailable("this sandbox has no cgroup to measure (the host is not root)")
        return Usage(self._cgroup.memory_bytes(), self._cgroup.processes())

    def freeze(self) -> None:
        self._freezer().freeze(True)

    def thaw(self) -> None:
        self._freezer().freeze(False)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        holder = getattr(self, "_holder", None)
        if holder is not None:
            # With the holder dies the namespace's init (self.pid), and with it the kernel kills the
            # rest; close returns once that init has finished exiting, so nothing is left running.
            kill_group(holder)
        if self._cgroup is not None:
            self._cgroup.remove()
        if holder is not None:
            _wait_exited(self.pid, START_TIMEOUT_S)
        for folder in self._mounts:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)

    # -- internals

    def _start(self) -> tuple[subprocess.Popen, int]:
        """Start the holder; its host pid once the sandbox is set up. bubblewrap reports the pid
        before it has mapped the uid and mounted the file system, so the holder also says
        ``ready`` from inside, after all of it."""
        read_end, write_end = os.pipe()
        argv = ["bwrap", *_NAMESPACES, *_filesystem(self.shared, self.readonly), "--cap-drop", "ALL",
                "--info-fd", str(write_end), "sh", "-c", "echo ready; exec sleep infinity"]  # fmt: skip
        try:
            # The holder is pid 1 inside, its environment readable there: nothing of the node's.
            holder = subprocess.Popen(
                argv, env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(write_end,), start_new_session=True, preexec_fn=self._preexec_holder,
            )  # fmt: skip
            os.close(write_end)
            write_end = -1
            info = _read_all(read_end, START_TIMEOUT_S)
            ready = _read_all(holder.stdout.fileno(), START_TIMEOUT_S, until=b"\n")
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        try:
            if ready.strip() != "ready":
                raise ValueError(ready)
            return holder, int(json.loads(info)["child-pid"])
        except (ValueError, KeyError):
            kill_group(holder)
            error = holder.stderr.read().decode(errors="replace").strip() if holder.stderr else ""
            raise SandboxUnavailable(f"bubblewrap did not start a sandbox: {error or info or 'no output'}") from None

    def _enter(self, cwd: Path) -> list[str]:
        return ["nsenter", f"--target={self.pid}", "--all", f"--setuid={SANDBOX_UID}", f"--setgid={SANDBOX_UID}",
                f"--wdns={cwd}", "--"]  # fmt: skip

    def _preexec_entering(self) -> None:
        """In a child before it executes ``nsenter``: join the cgroup, die with the starting
        thread, never gain privileges. ``nsenter`` keeps the host's uid to enter (an unprivileged
        uid may not enter every namespace of its own sandbox) and sets the sandbox's inside."""
        if self._cgroup is not None:
            for path in self._cgroup.join_files():
                with open(path, "w") as f:
                    f.write("0")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)

    def _preexec_holder(self) -> None:
        """As ``_preexec_entering``, and a root host hands the namespaces to the sandbox's uid."""
        self._preexec_entering()
        if self._root:
            _drop()

    def _freezer(self) -> cgroups.CGroup:
        if self._cgroup is None:
            raise SandboxUnavailable("this sandbox cannot freeze (no cgroup: the host is not root)")
        return self._cgroup


@functools.cache
def unavailable() -> str | None:
    """None when bubblewrap can make a sandbox on this machine, else what is missing (checked once
    a process, by starting one)."""
    for tool, package in (("bwrap", "bubblewrap"), ("nsenter", "util-linux"), ("setpriv", "util-linux")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian package {package}; scripts/setup.sh installs it)"
    probe = subprocess.run(
        ["bwrap", *_NAMESPACES, *_filesystem(()), "--cap-drop", "ALL", "true"],
        capture_output=True, text=True, timeout=30, preexec_fn=_drop if os.geteuid() == 0 else None,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"bubblewrap cannot create user namespaces here: {probe.stderr.strip()[-300:]}"
    return None


def _drop() -> None:
    os.setgroups([])
    os.setgid(SANDBOX_UID)
    os.setuid(SANDBOX_UID)


def _filesystem(shared: Sequence[Path], readonly: Sequence[Path] = ()) -> list[str]:
    args: list[str] = []
    for path in _SYSTEM:
        if os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _MERGED:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run", "--dir", "/var/tmp"]
    for folder in readonly:
        args += ["--ro-bind", str(folder), str(folder)]
    for folder in shared:
        args += ["--bind", str(folder), str(folder)]
    return args


def _mount_tmpfs(folder: Path, size_mb: int) -> None:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755,nosuid,nodev", "tmpfs", str(folder)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SandboxUnavailable(f"cannot mount a {size_mb} MiB tmpfs on {folder}: {done.stderr.strip()}")


def _read_all(fd: int, timeout_s: float, until: bytes | None = None) -> str:
    """What ``fd`` gives until it closes (or, with ``until``, until that ends the data) or the timeout."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while time.monotonic() < deadline and not (until and data.endswith(until)):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def _wait_exited(pid: int, timeout_s: float) -> None:
    """Until ``pid`` is gone or a zombie (its exit finished), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)
