"""The xdesktop harness passes the shared harness contract, refuses bad settings by name, says
which Debian package is missing, and refuses the system shortcuts of a real desktop unless its
settings allow them."""

from __future__ import annotations

import pytest

from harnesses.xdesktop import XDesktopHarness
from vlrl.harness import Action, ActionError, HarnessError, check_harness


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
        ({"allow_chords": ["alt+tab", "alt+nope"]}, "allow_chords"),
        ({"guard_actions": "no"}, "guard_actions"),
    ],
)
def test_bad_settings_name_the_field(settings, field):
    with pytest.raises(ValueError, match=field):
        XDesktopHarness(**settings)


def test_a_missing_program_names_its_debian_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HarnessError, match=r"install the Debian packages \[.*'mousepad'.*'xvfb'.*\]"):
        XDesktopHarness()


def test_a_refused_action_is_an_action_error_and_runs_nothing():
    harness = XDesktopHarness(tasks=["editor-write-save"])
    try:
        harness.reset(seed=3)
        with pytest.raises(ActionError, match=r"key alt\+f4 is refused on this desktop \(rule 'system chord'"):
            harness.step(Action.key("alt", "f4"))
        with pytest.raises(ActionError, match="rule 'no commands'"):
            harness.step(Action.type("rm -rf ~\n"))  # no terminal task: typed lines stay out
        assert any("mousepad" in p.args for p in harness.processes())  # the window is still there
    finally:
        harness.close()


def test_settings_allow_chords_or_turn_the_rules_off():
    assert XDesktopHarness.real_desktop
    allowing = XDesktopHarness(tasks=["editor-write-save"], allow_chords=["alt+tab"])
    unguarded = XDesktopHarness(tasks=["editor-write-save"], guard_actions=False)
    try:
        allowing.reset(seed=3)
        allowing.step(Action.key("alt", "tab"))
        with pytest.raises(ActionError, match="system chord"):
            allowing.step(Action.key("ctrl", "alt", "backspace"))
        unguarded.reset(seed=3)
        unguarded.step(Action.type("a line\n"))
        assert unguarded.key_policy() is None
    finally:
        allowing.close()
        unguarded.close()
