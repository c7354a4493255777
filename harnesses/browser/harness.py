"""``BrowserHarness``: mini web apps in headless Chromium, driven through Playwright's sync API.

Each instance launches one Chromium (the Playwright driver is shared per thread, see ``driver``)
with one page that every episode reuses: a reset navigates it to the episode's app, which starts
a fresh document; the apps keep their state in memory only, so nothing carries over. Reusing the
page costs ~0.1 s a reset where a new browser context and page cost ~0.35 s. The reward comes
from the app's own state (``window.__state()``), read by the harness after every step and never
shown to the agent.

Chromium runs in a sandbox (``sandbox='bubblewrap'``, ``vlrl.harness.sandbox``) as an
unprivileged user, with its own sandbox on (no ``--no-sandbox``), no network namespace of the
host's (the apps are served by Playwright's routing, never over a socket), and memory, process
and disk limits; a limit hit ends the episode as a failure naming it. ``sandbox='none'``
launches it on the node, with one warning.

Sync Playwright objects belong to the thread that made them, so the instance is ``thread_bound``:
every call must come from the constructing thread, and calls from elsewhere are refused.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from numbers import Integral
from typing import Any

from playwright.sync_api import Page

from harnesses.browser import driver
from harnesses.browser.input import perform
from harnesses.browser.oracle import POLICIES, Screen
from harnesses.browser.site import check_assets, page_url, serve
from harnesses.browser.tasks import FAMILIES, Episode
from vlrl.harness import Action, ActionError, Harness, HarnessError, Observation, StepResult, int_setting, task_names
from vlrl.harness.sandbox import check_available, limits_setting, open_sandbox, require, sandbox_setting
from vlrl.harness.sandbox.executable import sandboxed_executable
from vlrl.harness.sandbox.folders import instance_folder, remove_folder
from vlrl.mm import decode_image

CHROMIUM_ARGS = (
    "--headless", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    # Keyboard scrolls would otherwise animate, and a screenshot could catch them half way.
    "--disable-smooth-scrolling",
    # Re-rastering only the damaged part of a tile left anti-aliased edges (a rounded corner)
    # one level off from a full raster, so the same page gave different pixels after a reset.
    "--disable-partial-raster",
)
WIDTH_RANGE = (320, 3840)
HEIGHT_RANGE = (240, 2160)
PAGE_TIMEOUT_MS = 5000
"""Playwright's default is 30 s; the apps are local, so a wait that long only hides a bug."""
NEEDED = ("isolates_files", "isolates_network", "isolates_processes")
WANTED = ("limits_memory", "limits_processes", "limits_disk")
_STATE = "() => typeof window.__state === 'function' ? window.__state() : null"


class BrowserHarness(Harness):
    tasks = tuple(FAMILIES)
    thread_bound = True

    def __init__(
        self,
        *,
        width: int = 640,
        height: int = 480,
        tasks: Sequence[str] | None = None,
        max_steps: int = 15,
        chromium_path: str | os.PathLike[str] = "/usr/bin/chromium",
        sandbox: str = "bubblewrap",
        sandbox_memory_mb: int = 2048,
        sandbox_processes: int = 1024,
        sandbox_disk_mb: int = 512,
    ) -> None:
        self.width = int_setting("browser", "width", width, *WIDTH_RANGE)
        self.height = int_setting("browser", "height", height, *HEIGHT_RANGE)
        self.max_steps = int_setting("browser", "max_steps", max_steps, 1, 10_000)
        if tasks is not None:
            self.tasks = task_names("browser", tasks, tuple(FAMILIES))
        chromium_path = os.fspath(chromium_path)
        if not (os.path.isfile(chromium_path) and os.access(chromium_path, os.X_OK)):
            raise HarnessError(
                f"chromium_path={chromium_path!r}: no Chromium executable there; "
                "install it (`apt-get install chromium`) or pass chromium_path"
            )
        check_assets()
        self.sandbox = sandbox_setting("browser", sandbox)
        self.limits = limits_setting(
            "browser", memory_mb=sandbox_memory_mb, processes=sandbox_processes, disk_mb=sandbox_disk_mb
        )
        check_available("browser", self.sandbox)
        self._owner = threading.get_ident()
        self._rng = random.Random()
        self._episode: Episode | None = None
        self._ended = False
        self._steps = 0
        self._root = instance_folder("vlrl-browser-")
        self._box = open_sandbox(self.sandbox, f"{os.getpid()}-{self._root.name}", shared=[self._root / "box"], limits=self.limits)
        playwright = None
        try:
            if self.sandbox != "none":
                require("browser", self._box, NEEDED, WANTED)
            executable, args = self._chromium(chromium_path)
            playwright = driver.acquire()
            # Playwright passes --no-sandbox unless told otherwise.
            self._browser = playwright.chromium.launch(
                executable_path=executable, args=args, chromium_sandbox=self.sandbox != "none"
            )
        except BaseException:
            if playwright is not None:
                driver.release()
            self._box.close()
            remove_folder(self._root)
            raise
        self._closed = False
        try:
            self._page = self._new_page()
        except BaseException:
            self.close()
            raise

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        self._check_usable()
        family = self._requested_family(options)
        if seed is not None:
            if not isinstance(seed, Integral) or isinstance(seed, bool):
                raise ValueError(f"seed={seed!r}; expected an int or None")
            self._rng = random.Random(int(seed))
        episode = FAMILIES[family or self._rng.choice(self.tasks)](self._rng)
        self._episode = None
        # The pointer stays where the last episode left it; parked in the corner, it hovers nothing.
        self._page.mouse.move(0, 0)
        # A query URL always loads a new document, even when it equals the current one.
        self._page.goto(page_url(episode.page, episode.params))
        self._episode, self._steps, self._ended = episode, 0, False
        observation = self._observe()
        self._box.check()
        return observation, {"task": episode.family}

    def step(self, action: Action) -> StepResult:
        episode = self._active_episode()
        if not isinstance(action, Action):
            raise ActionError(f"step expects a vlrl Action, got {type(action).__name__}")
        action.check_bounds(self.width, self.height)
        perform(self._page, action)
        self._steps += 1
        solved = episode.solved_by(self._page.evaluate(_STATE))
        terminated = solved or action.kind in ("done", "fail")
        truncated = not terminated and self._steps >= self.max_steps
        self._ended = terminated or truncated
        info = {"task": episode.family, "success": solved, "steps": self._steps}
        observation = self._observe()
        self._box.check()
        return observation, float(solved), terminated, truncated, info

    def oracle(self) -> Action:
        episode = self._active_episode()
        return POLICIES[episode.family](Screen(self._page, self.width, self.height), episode.args)

    def close(self) -> None:
        if self._closed:
            return
        self._check_thread()
        self._closed = True
        self._episode = None
        try:
            self._browser.close()
        finally:
            driver.release()
            self._box.close()
            remove_folder(self._root)

    def _chromium(self, chromium_path: str) -> tuple[str, list[str]]:
        """The executable Playwright starts and its arguments: a script that runs Chromium in the
        sandbox with a profile in the instance's box (so every process of the instance names
        that folder, ``processes``); as root without a sandbox, Chromium needs ``--no-sandbox``."""
        box = self._root / "box"
        home, profile = box / "home", box / "profile"
        home.mkdir()
        profile.mkdir()
        self._box.own(box)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "XDG_CONFIG_HOME": str(home / ".config"),
               "XDG_CACHE_HOME": str(home / ".cache")}  # fmt: skip
        script = sandboxed_executable(
            self._box, chromium_path, self._root / "chromium", env=env, cwd=home, replace={"--user-data-dir": str(profile)}
        )
        unsandboxed_root = self.sandbox == "none" and os.geteuid() == 0
        return str(script), [*CHROMIUM_ARGS, *(["--no-sandbox"] if unsandboxed_root else [])]

    def processes(self) -> list[int]:
        """The pids of the instance's live processes (Chromium's, and the sandbox's that entered it)."""
        marker = f"{self._root}/".encode()
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
        return found

    def _new_page(self) -> Page:
        context = self._browser.new_context(
            viewport={"width": self.width, "height": self.height},
            device_scale_factor=1,
            locale="en-US",
            timezone_id="UTC",
            reduced_motion="reduce",
            service_workers="block",
        )
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        serve(context)
        return context.new_page()

    def _observe(self) -> Observation:
        # caret="hide": a blinking text cursor would make the same state give different pixels.
        pixels = decode_image(self._page.screenshot(type="png", caret="hide"))
        return Observation(screenshot=pixels, goal=self._episode.goal, url=self._page.url)

    def _requested_family(self, options: dict[str, Any] | None) -> str | None:
        options = options or {}
        unknown = set(options) - {"task"}
        if unknown:
            raise ValueError(f"reset options {sorted(unknown)} are unknown; the browser harness takes 'task'")
        family = options.get("task")
        if family is not None and family not in self.tasks:
            raise ValueError(f"task {family!r} is not one of this harness's tasks {list(self.tasks)}")
        return family

    def _active_episode(self) -> Episode:
        self._check_usable()
        if self._episode is None:
            raise HarnessError("no episode: call reset() before step() or oracle()")
        if self._ended:
            raise HarnessError("the episode has ended (terminated or truncated): call reset() first")
        return self._episode

    def _check_usable(self) -> None:
        if self._closed:
            raise HarnessError("the browser harness is closed")
        self._check_thread()

    def _check_thread(self) -> None:
        if threading.get_ident() != self._owner:
            raise HarnessError(
                "the browser harness is thread-bound (sync Playwright): use it only from the thread that created it"
            )

