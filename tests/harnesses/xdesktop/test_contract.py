"""The xdesktop harness passes the shared harness contract, refuses bad settings by name, says
which Debian package is missing, and refuses the system shortcuts of a real desktop."""

from __future__ import annotations

import pytest

from harnesses.xdesktop import XDesktopHarness
from harnesses.xdesktop.policy import KeyPolicy
from vlrl.harness import Action, ActionError, HarnessError, check_harness

pytestmark = pytest.mark.slow


def test_passes_the_harness_checker():
    check_harness(lambda: XDesktopHarness(width=800, height=600))


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"width": 100}, "width"),
        ({"height": True}, "height"),
        ({"max_steps": 0}, "max_steps"),
        ({"tasks": []}, "tasks"),
        ({"tasks": ["editor-write-save", "solitaire"]}, "solitaire"),
    ],
)
def test_bad_settings_name_the_field(settings, field):
    with pytest.raises(ValueError, match=field):
        XDesktopHarness(**settings)


def test_a_missing_program_names_its_debian_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HarnessError, match=r"install the Debian packages \[.*'mousepad'.*'xvfb'.*\]"):
        XDesktopHarness()


@pytest.mark.parametrize("keys", [("ctrl", "alt", "delete"), ("alt", "f4"), ("meta",), ("ctrl", "alt", "f2")])
def test_system_shortcuts_are_refused(keys):
    with pytest.raises(ActionError, match="refused on this desktop"):
        KeyPolicy().check(Action.key(*keys))
    KeyPolicy().check(Action.key("ctrl", "s"))


def test_a_typed_command_line_needs_a_sandbox_that_runs_commands():
    with pytest.raises(ActionError, match="runs no commands"):
        KeyPolicy().check(Action.type("rm -rf ~\n"))
    KeyPolicy(commands=True).check(Action.type("ls > listing.txt\n"))


def test_a_refused_action_is_an_action_error_and_runs_nothing():
    harness = XDesktopHarness(tasks=["editor-write-save"])
    try:
        harness.reset(seed=3)
        with pytest.raises(ActionError, match="refused"):
            harness.step(Action.key("alt", "f4"))
        assert any(p.args[0] == "mousepad" for p in harness.processes())  # the window is still there
    finally:
        harness.close()
