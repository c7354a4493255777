"""One shared MiniWoB harness for the tests that only reset and step (a Chromium costs ~0.6 s)."""

from __future__ import annotations

import pytest

from harnesses.miniwob import MiniWoBHarness


@pytest.fixture(scope="package")
def harness():
    instance = MiniWoBHarness()
    yield instance
    instance.close()
