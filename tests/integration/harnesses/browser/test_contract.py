"""The browser harness passes the shared harness contract and refuses bad settings by name."""

from __future__ import annotations

import pytest

from harnesses.browser import BrowserHarness
from vlrl.harness import HarnessError, check_harness, make


def test_passes_the_harness_checker():
    check_harness(lambda: BrowserHarness())


def test_make_builds_it_from_the_entry_point():
    harness = make("browser", width=800, height=600, tasks=["todo-manage"])
    try:
        assert isinstance(harness, BrowserHarness) and harness.thread_bound
        assert harness.tasks == ("todo-manage",)
        obs, info = harness.reset(seed=0)
        assert (obs.width, obs.height) == (800, 600)
        assert info["task"] == "todo-manage"
    finally:
        harness.close()


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"width": 100}, "width"),
        ({"width": 640.0}, "width"),
        ({"height": True}, "height"),
        ({"height": 10_000}, "height"),
        ({"max_steps": 0}, "max_steps"),
        ({"tasks": []}, "tasks"),
        ({"tasks": "form-fill"}, "tasks"),
        ({"tasks": ["form-fill", "crossword"]}, "crossword"),
    ],
)
def test_bad_settings_name_the_field(settings, field):
    with pytest.raises(ValueError, match=field):
        BrowserHarness(**settings)


def test_missing_chromium_says_how_to_install_it(tmp_path):
    with pytest.raises(HarnessError, match="apt-get install chromium"):
        BrowserHarness(chromium_path=tmp_path / "chromium")
