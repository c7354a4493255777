"""``XSession``: one private X desktop (Xvfb, a window manager, the apps a task launches) in a
sandbox of its own, and the home folder its applications see.

Containment (``vlrl.harness.sandbox``, default ``bubblewrap``): every program of the session runs
in the instance's sandbox, as an unprivileged user with no capabilities, in its own user, mount,
pid and network namespaces, under its cgroup's memory and process limits; it sees the system
read-only and the session's box (home, runtime folder, logs: a size-limited tmpfs) read-write,
nothing else of the host. The X server listens only inside (``-nolisten tcp``, its socket in the
sandbox's private ``/tmp``); the host's side (the harness's screenshots and ``xdotool`` input)
reaches it through a display number reserved on the host the way X servers reserve them (a
``/tmp/.X<n>-lock`` file) and a link from ``/tmp/.X11-unix/X<n>`` to the socket inside. No
instance can reach another's display: it sees neither the host's ``/tmp`` nor its abstract
sockets. With ``sandbox='none'`` the programs run on the host as before (one warning a process).

Clean-up: every process is started in its own process group and, with ``PR_SET_PDEATHSIG``, is
killed by the kernel when the thread that started it dies, so nothing outlives ``close()`` or a
killed env host (the harness is ``thread_bound``: its thread lives as long as the instance); the
sandbox's pid namespace dies with it. ``close()`` kills the process groups, the sandbox and
removes the folder; should the host process die instead, a reaper (a shell polling the host's
pid every half second) removes the folder after it, and where the reaper died with the host (Ray
kills a dead worker's whole process tree) the next session on the machine sweeps the folders,
display links and cgroups of hosts that are gone (a folder's name carries its host's pid).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from vlrl.harness import HarnessError
from vlrl.harness.sandbox import Limits, Sandbox, open_sandbox
from vlrl.harness.sandbox.folders import instance_folder, remove_folder
from vlrl.harness.sandbox.processes import alive, kill_group

PACKAGES = {
    "Xvfb": "xvfb",
    "openbox": "openbox",
    "xdotool": "xdotool",
    "mousepad": "mousepad",
    "galculator": "galculator",
    "xterm": "xterm",
    "pcmanfm": "pcmanfm",
    "xprop": "x11-utils",
}
"""Executable -> the Debian package that provides it (``scripts/setup.sh`` installs them)."""

START_TIMEOUT_S = 10.0

_GTK_SETTINGS = """[Settings]
gtk-cursor-blink = false
gtk-enable-animations = false
gtk-recent-files-enabled = false
"""
"""A blinking caret or an animation would keep the screen from ever settling."""

_OPENBOX_RC = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc">
  <focus><focusNew>yes</focusNew><followMouse>no</followMouse></focus>
  <placement><policy>Smart</policy></placement>
  <desktops><number>1</number></desktops>
  <keyboard></keyboard>
  <mouse>
    <context name="Client"><mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind></context>
    <context name="Titlebar"><mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind></context>
  </mouse>
</openbox_config>
"""
"""No key bindings, and only click-to-focus for the mouse: the window manager's own shortcuts (run
dialogs, moving windows, switching desktops) are not part of any task, but a click into a window
(or its title) focuses and raises it, so a task with two applications can switch between them."""

_GSETTINGS = """[org/xfce/mousepad/preferences/window]
path-in-title=false
"""
"""Applications' settings through GLib's keyfile backend, inside the sandbox (no dconf daemon):
the title shows no sandbox path, so every instance shows the same screen for the same seed."""

_REAPER = 'while kill -0 "$0" 2>/dev/null; do sleep 0.5; done; umount -l "$1/box" 2>/dev/null; rm -rf -- "$1"'
"""Removes the session folder once the host process (pid ``$0``) is gone."""

_X11_DIR = Path("/tmp/.X11-unix")
_DISPLAYS = range(100, 1000)
"""Display numbers reserved for sandboxed sessions (below 100 are left to the machine's own)."""

_PREFIX = "vlrl-xdesktop-"


def check_packages() -> None:
    """Raise naming every missing executable and the Debian package to install."""
    missing = {exe: pkg for exe, pkg in PACKAGES.items() if shutil.which(exe) is None}
    if missing:
        raise HarnessError(
            f"the xdesktop harness needs {sorted(missing)}: install the Debian packages "
            f"{sorted(set(missing.values()))} (`apt-get install {' '.join(sorted(set(missing.values())))}`; "
            "scripts/setup.sh does)"
        )


class XSession:
    def __init__(self, width: int, height: int, *, sandbox: str = "bubblewrap", limits: Limits = Limits()) -> None:
        self.width, self.height = width, height
        _sweep_displays()
        self.root = instance_folder(_PREFIX)
        self.box = self.root / "box"
        self.home = self.box / "home"
        self._system: list[subprocess.Popen] = []
        self._apps: list[subprocess.Popen] = []
        self._closed = False
        self._reserved: int | None = None
        self._reaper = subprocess.Popen(
            ["sh", "-c", _REAPER, str(os.getpid()), str(self.root)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            self.sandbox: Sandbox = open_sandbox(sandbox, f"{os.getpid()}-{self.root.name}", shared=[self.box], limits=limits)
            (self.box / "logs").mkdir(exist_ok=True)
            self.fresh_home()
            self.display = self._start_xvfb()
            self._system.append(self._spawn(["openbox"], self._system_log("openbox")))
            self._wait_for_window_manager()
        except BaseException:
            self.close()
            raise

    # -- the sandbox folder

    def fresh_home(self) -> None:
        """An empty home folder with the settings every app starts from."""
        if self.home.exists():
            shutil.rmtree(self.home)
        for sub in (".config/gtk-3.0", ".config/openbox", ".config/glib-2.0/settings", ".local/share", ".cache", "Documents"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        (self.home / ".config/gtk-3.0/settings.ini").write_text(_GTK_SETTINGS)
        (self.home / ".config/openbox/rc.xml").write_text(_OPENBOX_RC)
        (self.home / ".config/glib-2.0/settings/keyfile").write_text(_GSETTINGS)
        runtime = self.box / "runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        self.sandbox.own(self.box)

    def env(self) -> dict[str, str]:
        """The environment of every process of the session: its display and folders only."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "DISPLAY": getattr(self, "display", ""),
            "HOME": str(self.home),
            "USER": os.environ.get("USER", "vlrl"),
            "LANG": "C.UTF-8",
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local/share"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_RUNTIME_DIR": str(self.box / "runtime"),
            "NO_AT_BRIDGE": "1",  # no accessibility bus to look for
            "GTK_OVERLAY_SCROLLING": "0",
            "GSETTINGS_BACKEND": "keyfile",
        }

    # -- applications

    def launch(self, argv: Sequence[str], *, cwd: Path | None = None) -> subprocess.Popen:
        """Start an application of the task in the session (killed by ``kill_apps`` and ``close``).
        What the task wrote into the home folder is handed to the sandbox's user first."""
        self.sandbox.own(self.home)
        log = self._system_log(f"app-{len(self._apps)}")
        process = self._spawn(list(argv), log, cwd=cwd or self.home)
        self._apps.append(process)
        return process

    def kill_apps(self) -> None:
        """End every application the tasks launched (the X server and window manager stay), and
        whatever they started in sessions of their own (a terminal's shell, a command the agent
        ran in the background): every process whose environment names this session's home."""
        for process in self._apps:
            kill_group(process)
        self._apps.clear()
        _kill_by_home(str(self.home), keep=_with_descendants(self._system))

    def park_pointer(self) -> None:
        """Move the pointer to the screen's bottom-right corner (the last episode left it anywhere),
        so no hover highlight or tooltip depends on what came before."""
        corner = [str(self.width - 1), str(self.height - 1)]
        subprocess.run(["xdotool", "mousemove", *corner], check=False, env=self.env(), capture_output=True, timeout=10)

    def processes(self) -> list[subprocess.Popen]:
        """Every live process of the session (for tests and accounting)."""
        return [p for p in [*self._system, *self._apps] if p.poll() is None]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.kill_apps()
        for process in reversed(self._system):
            kill_group(process)
        self._system.clear()
        _kill_by_home(str(self.home), keep=set())
        if hasattr(self, "sandbox"):
            self.sandbox.close()
        self._release_display()
        remove_folder(self.root)
        kill_group(self._reaper)

    # -- internals

    def _start_xvfb(self) -> str:
        """Start the X server; its display number once it is ready. In a sandbox the number is
        reserved on the host first and the host's socket path linked to the one inside."""
        read_end, write_end = os.pipe()
        try:
            number = [] if not self.sandbox.capabilities.isolates_files else [f":{self._reserve_display()}"]
            argv = [
                "Xvfb", *number, "-displayfd", str(write_end), "-screen", "0", f"{self.width}x{self.height}x24",
                "-nolisten", "tcp", "-noreset", "-nocursor",
            ]  # fmt: skip
            process = self._spawn(argv, self._system_log("xvfb"), pass_fds=(write_end,))
            self._system.append(process)
            os.close(write_end)
            write_end = -1
            number = _read_line(read_end, START_TIMEOUT_S)
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        if not number.isdigit():
            log = self._system_log("xvfb").read_text(errors="replace")[-500:]
            raise HarnessError(f"Xvfb did not start within {START_TIMEOUT_S:.0f} s: {log or 'no output'}")
        if self._reserved is not None:
            (_X11_DIR / f"X{number}").symlink_to(self.sandbox.host_path(f"/tmp/.X11-unix/X{number}"))
        return f":{number}"

    def _reserve_display(self) -> int:
        """A display number no X server of the host uses or will take (its lock file is ours)."""
        _X11_DIR.mkdir(mode=0o1777, exist_ok=True)
        for number in _DISPLAYS:
            try:
                fd = os.open(f"/tmp/.X{number}-lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as lock:
                lock.write(f"{os.getpid():>10}\n")
            if os.path.lexists(_X11_DIR / f"X{number}"):
                os.unlink(f"/tmp/.X{number}-lock")
                continue
            self._reserved = number
            return number
        raise HarnessError(f"no free X display number in {_DISPLAYS.start}-{_DISPLAYS.stop - 1} on this machine")

    def _release_display(self) -> None:
        if self._reserved is not None:
            for path in (_X11_DIR / f"X{self._reserved}", Path(f"/tmp/.X{self._reserved}-lock")):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            self._reserved = None

    def _wait_for_window_manager(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            done = subprocess.run(
                ["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"], env=self.env(), capture_output=True, text=True
            )
            if done.returncode == 0 and "window id" in done.stdout:
                return
            if self._system[-1].poll() is not None:
                break
            time.sleep(0.05)
        raise HarnessError(f"openbox did not start on {self.display}: {self._system_log('openbox').read_text()[-500:]}")

    def _system_log(self, name: str) -> Path:
        """In the box: a program that floods its output fills the box's tmpfs, not the host's disk."""
        return self.box / "logs" / f"{name}.log"

    def _spawn(
        self, argv: list[str], log: Path, *, cwd: Path | None = None, pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen:
        return self.sandbox.spawn(argv, env=self.env(), cwd=cwd or self.home, log=log, pass_fds=pass_fds)


def _read_line(fd: int, timeout_s: float) -> str:
    """One newline-ended line from ``fd`` (Xvfb writes the display number, then a newline, and
    dies if the pipe closes in between), or what came before the timeout."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while not data.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 64) if ready else b""
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def _with_descendants(processes: list[subprocess.Popen]) -> set[int]:
    """The pids of ``processes`` and of everything they started (in a sandbox, the program
    itself is the child of the ``nsenter`` that entered it)."""
    pids = {p.pid for p in processes}
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            pids |= {child.pid for child in psutil.Process(process.pid).children(recursive=True)}
    return pids


def _kill_by_home(home: str, keep: set[int]) -> None:
    marker = f"HOME={home}"
    for process in psutil.process_iter():
        if process.pid in keep:
            continue
        try:
            if f"HOME={process.environ().get('HOME', '')}" == marker:
                process.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass


def _sweep_displays() -> None:
    """Remove the display reservations of sandboxes that are gone."""
    for link in _X11_DIR.glob("X*") if _X11_DIR.is_dir() else ():
        if link.is_symlink() and not link.exists():  # into a sandbox that is gone
            lock = Path(f"/tmp/.{link.name}-lock")
            owner = lock.read_text().strip() if lock.exists() else ""
            if not (owner.isdigit() and alive(int(owner))):
                for path in (link, lock):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
