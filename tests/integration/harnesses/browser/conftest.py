"""One shared browser harness for the tests that only reset and step (a Chromium costs ~0.6 s)."""

from __future__ import annotations

import pytest

from harnesses.browser import BrowserHarness


@pytest.fixture(scope="package")
def harness():
    instance = BrowserHarness()
    yield instance
    instance.close()
