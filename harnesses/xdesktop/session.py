"""``XSession``: one private X desktop (Xvfb, a window manager, the apps a task launches) and the
sandbox home folder its applications see.

Isolation: every session has its own display number (``Xvfb -displayfd`` picks a free one) with
``-nolisten tcp`` (only local Unix-socket clients), its own ``HOME`` and XDG folders inside a
fresh temporary directory, and an environment that names only these. Clean-up: every process is
started in its own process group and, with ``PR_SET_PDEATHSIG``, is killed by the kernel when the
thread that started it dies, so nothing outlives ``close()`` or a killed env host (the harness is
``thread_bound``: its thread lives as long as the instance). ``close()`` kills the process groups
and removes the folder; should the host process die instead, a reaper (a shell polling the
host's pid every half second) removes the folder after it, and where the reaper died with the
host (Ray kills a dead worker's whole process tree) the next session on the machine sweeps the
folders of hosts that are gone (a folder's name carries its host's pid).
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from vlrl.harness import HarnessError

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

_REAPER = 'while kill -0 "$0" 2>/dev/null; do sleep 0.5; done; rm -rf -- "$1"'
"""Removes the session folder once the host process (pid ``$0``) is gone."""

_PREFIX = "vlrl-xdesktop-"

_PR_SET_PDEATHSIG = 1


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
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        _sweep_orphans()
        self.root = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
        self.home = self.root / "home"
        self._system: list[subprocess.Popen] = []
        self._apps: list[subprocess.Popen] = []
        self._closed = False
        self._reaper = subprocess.Popen(
            ["sh", "-c", _REAPER, str(os.getpid()), str(self.root)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        try:
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
        runtime = self.root / "runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)

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
            "XDG_RUNTIME_DIR": str(self.root / "runtime"),
            "NO_AT_BRIDGE": "1",  # no accessibility bus to look for
            "GTK_OVERLAY_SCROLLING": "0",
            "GSETTINGS_BACKEND": "keyfile",
        }

    # -- applications

    def launch(self, argv: Sequence[str], *, cwd: Path | None = None) -> subprocess.Popen:
        """Start an application of the task in the session (killed by ``kill_apps`` and ``close``)."""
        log = self.root / f"app-{len(self._apps)}.log"
        process = self._spawn(list(argv), log, cwd=cwd or self.home)
        self._apps.append(process)
        return process

    def kill_apps(self) -> None:
        """End every application the tasks launched (the X server and window manager stay), and
        whatever they started in sessions of their own (a terminal's shell, a command the agent
        ran in the background): every process whose environment names this session's home."""
        for process in self._apps:
            _kill_group(process)
        self._apps.clear()
        _kill_by_home(str(self.home), keep={p.pid for p in self._system})

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
            _kill_group(process)
        self._system.clear()
        _kill_by_home(str(self.home), keep=set())
        shutil.rmtree(self.root, ignore_errors=True)
        _kill_group(self._reaper)

    # -- internals

    def _start_xvfb(self) -> str:
        read_end, write_end = os.pipe()
        try:
            argv = [
                "Xvfb", "-displayfd", str(write_end), "-screen", "0", f"{self.width}x{self.height}x24",
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
            log = (self.root / "xvfb.log").read_text(errors="replace")[-500:]
            raise HarnessError(f"Xvfb did not start within {START_TIMEOUT_S:.0f} s: {log or 'no output'}")
        return f":{number}"

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
        raise HarnessError(f"openbox did not start on {self.display}: {(self.root / 'openbox.log').read_text()[-500:]}")

    def _system_log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _spawn(
        self, argv: list[str], log: Path, *, cwd: Path | None = None, pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen:
        with open(log, "ab") as out:
            return subprocess.Popen(
                argv,
                env=self.env(),
                cwd=cwd or self.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=pass_fds,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )


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


def _sweep_orphans() -> None:
    """Remove the session folders of host processes that no longer exist."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        pid = folder.name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
