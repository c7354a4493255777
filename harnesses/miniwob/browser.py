"""One headless Chromium showing MiniWoB++ task pages, driven through ChromeDriver.

The episode logic is MiniWoB's own page API (``core.*`` in the package's ``html/core/core.js``);
this module owns the processes, the task page, and reading the page back (screenshot, DOM,
reward). One browser serves every task: switching task loads another page (~0.1 s) instead of
starting another Chromium (~0.5 s).

Chromium runs in a sandbox (``vlrl.harness.sandbox``, default ``bubblewrap``) as an
unprivileged user, with its own sandbox on, seeing the system and the task pages read-only and
its profile folder, with no network but its own loopback, under memory, process and disk limits.
The harness starts it there with a DevTools port on that loopback, and ChromeDriver, on the host,
attaches to it (``debuggerAddress``) through a relay port on the host's loopback that leads in
(``vlrl.harness.sandbox.relay``). With ``sandbox='none'`` ChromeDriver starts Chromium itself.

Everything the browser writes (profile, crash database) lives in one temporary directory whose
path appears on the command line of every Chromium process, including the crash handlers that
re-parent themselves to init; that is how ``processes()`` finds them all and ``close()`` leaves
no orphans.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import shutil
import signal
import time
import weakref
from pathlib import Path
from typing import Any

from miniwob import selenium_actions
from miniwob.constants import TASK_HEIGHT, TASK_WIDTH
from miniwob.dom import DOMElement
from miniwob.selenium_instance import DEFAULT_BASE_URL, HTML_DIR
from PIL import Image
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from vlrl.harness import HarnessError
from vlrl.harness.sandbox import Limits, Sandbox, open_sandbox, require
from vlrl.harness.sandbox.relay import LoopbackRelay
from vlrl.harness.sandbox.folders import instance_folder, remove_folder

CHROMIUM_FLAGS = (
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    # Screenshots are read in CSS pixels: one device pixel per CSS pixel on every host, and a
    # viewport well beyond the 160x210 task area (and the parked pointer).
    "--force-device-scale-factor=1",
    "--window-size=800,600",
)

NEEDED = ("isolates_files", "isolates_network", "isolates_processes")
WANTED = ("limits_memory", "limits_processes", "limits_disk")
DEVTOOLS_PORT = 9222
"""Chromium's DevTools port on the sandbox's own loopback (each sandbox has its own)."""

TASK_NAMES: tuple[str, ...] = tuple(sorted(path.stem for path in (HTML_DIR / "miniwob").glob("*.html")))
"""MiniWoB++ tasks served from files. The ``flight.*`` tasks need an HTTP server and a larger
screen, so they are not offered."""

PARKED_POINTER = (TASK_WIDTH + 100, TASK_HEIGHT + 100)
"""Where the mouse waits between episodes: on the empty page outside the task area."""
PAGE_LOAD_S = 10.0
TASK_READY_S = 2.0
SHUTDOWN_S = 5.0


class MiniWoBBrowser:
    """A Chromium tab on one MiniWoB task page at a time. Not thread-safe: one caller at a time,
    from any thread (Selenium speaks HTTP to ChromeDriver; nothing is tied to a thread)."""

    def __init__(self, *, sandbox: str = "bubblewrap", limits: Limits = Limits()) -> None:
        chromium = _executable("MINIWOB_CHROME_BINARY", ("chromium", "chromium-browser", "google-chrome"))
        chromedriver = _executable("MINIWOB_CHROMEDRIVER", ("chromedriver",))
        root = instance_folder("vlrl-miniwob-")
        self._home = str(root)
        box = root / "box"
        self.sandbox: Sandbox = open_sandbox(
            sandbox, f"{os.getpid()}-{root.name}", shared=[box], readonly=[HTML_DIR], limits=limits
        )
        self._relay: LoopbackRelay | None = None
        options = webdriver.ChromeOptions()
        try:
            if sandbox == "none":  # ChromeDriver starts Chromium on the node; as root it needs --no-sandbox
                options.binary_location = chromium
                for flag in (*CHROMIUM_FLAGS, *(["--no-sandbox"] if os.geteuid() == 0 else []), f"--user-data-dir={box}/profile"):
                    options.add_argument(flag)
            else:
                require("miniwob", self.sandbox, NEEDED, WANTED)
                self._relay = self._start_inside(chromium, box)
                options.debugger_address = self._relay.address
        except BaseException:
            _close_sandbox(self.sandbox, self._relay, root)
            raise
        # Chromium puts its crash database under XDG_CONFIG_HOME: keep it (and the marker) in our dir.
        service = Service(executable_path=chromedriver, env={**os.environ, "XDG_CONFIG_HOME": str(box)})
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except WebDriverException as error:
            _close_sandbox(self.sandbox, self._relay, root)
            raise HarnessError(f"cannot start Chromium {chromium} through {chromedriver}: {error.msg}") from error
        self._service = service
        self.driver_pid: int = service.process.pid
        self._finalizer = weakref.finalize(self, _shut_down, self.driver, self._home, self.sandbox, self._relay)
        self.task: str | None = None

    def _start_inside(self, chromium: str, box: Path) -> LoopbackRelay:
        """Start Chromium in the sandbox with its DevTools port on the sandbox's loopback; the
        relay that leads there, once Chromium answers on it."""
        (box / "profile").mkdir()
        self.sandbox.own(box)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(box), "LANG": "C.UTF-8", "XDG_CONFIG_HOME": str(box)}
        argv = [chromium, *CHROMIUM_FLAGS, f"--remote-debugging-port={DEVTOOLS_PORT}", f"--user-data-dir={box}/profile",
                "about:blank"]  # fmt: skip
        process = self.sandbox.spawn(argv, env=env, cwd=box, log=box / "chromium.log")
        sandbox = self.sandbox  # not self: the relay's thread must not keep this browser from its finalizer
        relay = LoopbackRelay(lambda: sandbox.connect(DEVTOOLS_PORT))
        deadline = time.monotonic() + PAGE_LOAD_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                sandbox.connect(DEVTOOLS_PORT).close()
                return relay
            except OSError:
                time.sleep(0.05)
        relay.close()
        log = (box / "chromium.log").read_text(errors="replace")[-500:]
        raise HarnessError(f"Chromium did not open its DevTools port in the sandbox within {PAGE_LOAD_S:g} s: {log}")

    def open(self, task: str) -> None:
        """Show ``task``'s page (no-op when it is already shown and was not navigated away from)."""
        url = f"{DEFAULT_BASE_URL}{task}.html"
        if task == self.task and self.driver.current_url == url:
            return
        self.task = None
        self.driver.get(url)
        WebDriverWait(self.driver, PAGE_LOAD_S).until(
            expected_conditions.presence_of_element_located((By.ID, "sync-task-cover"))
        )
        # A click on the sync cover would start an unseeded episode; only begin() may start one.
        self.driver.execute_script("core.cover_div.onclick = null;")
        self.task = task

    def begin(self, seed: int, time_limit_ms: int | None) -> None:
        """Start a fresh episode of the open task, generated from ``seed``. Focus and the mouse
        position outlive an episode on the page, so both are cleared first: the same seed then
        shows the same first screen whatever ran before."""
        self.driver.execute_script("core.endEpisode(0); if (document.activeElement) document.activeElement.blur();")
        selenium_actions.execute_move_coords(*PARKED_POINTER, self.driver)
        limit = "" if time_limit_ms is None else f"core.EPISODE_MAX_TIME = {int(time_limit_ms)};"
        self.driver.execute_script(
            f"Math.seedrandom({int(seed)}); core.setDataMode('train'); {limit} core.startEpisodeReal();"
        )
        deadline = time.monotonic() + TASK_READY_S
        while not self.driver.execute_script("return WOB_TASK_READY;"):
            if time.monotonic() > deadline:
                raise HarnessError(f"MiniWoB task {self.task!r} did not become ready within {TASK_READY_S} s")
            time.sleep(0.02)

    def end(self, reward: float, reason: str) -> None:
        """End the running episode with ``reward`` (no-op when the page already ended it)."""
        self.driver.execute_script("core.endEpisode(arguments[0], false, arguments[1]);", reward, reason)

    def utterance(self) -> str:
        """The task's instruction. The natural-language email pages answer ``{utterance, fields}``
        instead of the text, as ``miniwob.selenium_instance`` also reads it."""
        answer = self.driver.execute_script("return core.getUtterance();")
        return answer["utterance"] if isinstance(answer, dict) else answer

    def time_limit_s(self) -> float:
        return self.driver.execute_script("return core.EPISODE_MAX_TIME;") / 1000.0

    def status(self) -> dict[str, Any]:
        """The page's episode state: done, env_reward (time-decayed), raw_reward, reason."""
        return self.driver.execute_script(
            "return {done: WOB_DONE_GLOBAL, env_reward: WOB_REWARD_GLOBAL,"
            " raw_reward: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON};"
        )

    def screenshot(self) -> Image.Image:
        """The task area (``TASK_WIDTH`` x ``TASK_HEIGHT`` CSS pixels at the top left), RGB."""
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "clip": {"x": 0, "y": 0, "width": TASK_WIDTH, "height": TASK_HEIGHT, "scale": 1}},
        )
        return Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")

    def dom(self) -> DOMElement:
        return DOMElement(self.driver.execute_script("return core.getDOMInfo();"))

    def processes(self) -> set[int]:
        """Live processes of this browser: ChromeDriver and every Chromium process it led to."""
        driver = {self.driver_pid} if self._service.process.poll() is None else set()
        return driver | _chromium_processes(self._home)

    def close(self) -> None:
        """Quit Chromium and ChromeDriver and delete the profile; idempotent."""
        self._finalizer()


def _shut_down(driver: webdriver.Chrome, home: str, sandbox: Sandbox, relay: LoopbackRelay | None) -> None:
    """Quit through ChromeDriver (``quit`` also stops ChromeDriver, even a dead one), then kill
    whatever Chromium process is left, as when ChromeDriver had died. A process is ours when its
    command line holds our own temporary directory, so no other process can be hit."""
    driver.quit()
    deadline = time.monotonic() + SHUTDOWN_S
    while (left := _chromium_processes(home)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    _close_sandbox(sandbox, relay, Path(home))


def _close_sandbox(sandbox: Sandbox, relay: LoopbackRelay | None, root: Path) -> None:
    if relay is not None:
        relay.close()
    sandbox.close()
    remove_folder(root)


def _executable(env_var: str, names: tuple[str, ...]) -> str:
    """The program named by ``env_var`` (the variables the miniwob package reads), else on PATH."""
    path = os.environ.get(env_var) or next(filter(None, map(shutil.which, names)), None)
    if not path or not os.access(path, os.X_OK):
        raise HarnessError(f"MiniWoB needs {names[0]}: set {env_var} or put one of {list(names)} on PATH")
    return path


def _chromium_processes(home: str) -> set[int]:
    """Live (not zombie) processes whose command line holds ``home``."""
    marker = f"{home}/".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and marker in _read(entry / "cmdline"):
            # The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
            state = _read(entry / "stat").rpartition(b")")[2].split()[:1]
            if state and state[0] not in (b"Z", b"X"):
                found.add(int(entry.name))
    return found


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
