"""An unknown MiniWoB suite is refused before a browser starts. The suites themselves, on Chromium, are
tests/integration/harnesses/miniwob/test_suite.py."""

from __future__ import annotations

import pytest

from harnesses.miniwob import MiniWoBHarness
from vlrl.config import ConfigError


def test_an_unknown_suite_is_refused_before_a_browser_starts():
    with pytest.raises(ConfigError, match="'suite'.*'oracle'.*'all'"):
        MiniWoBHarness(suite="everything")
