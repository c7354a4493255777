"""One Playwright driver per thread, shared by the harness instances made on that thread.

Sync Playwright cannot start twice on one thread (the second start finds the first one's event
loop running), yet the harness checker and tests hold two instances on one thread. So each
instance launches and owns its own Chromium, while the driver (a node process) is counted per
thread and stops with the last instance of its thread.
"""

from __future__ import annotations

import threading

from playwright.sync_api import Playwright, sync_playwright

_local = threading.local()


class _Driver:
    __slots__ = ("playwright", "users")

    def __init__(self) -> None:
        self.playwright = sync_playwright().start()
        self.users = 0


def acquire() -> Playwright:
    """This thread's driver, started on first use; pair every call with ``release()``."""
    driver = getattr(_local, "driver", None)
    if driver is None:
        driver = _local.driver = _Driver()
    driver.users += 1
    return driver.playwright


def release() -> None:
    """Drop one use of this thread's driver; the last one stops it."""
    driver = _local.driver
    driver.users -= 1
    if driver.users == 0:
        _local.driver = None
        driver.playwright.stop()
