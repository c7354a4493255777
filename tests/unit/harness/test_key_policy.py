"""The key and text policy of real-desktop harnesses: system chords and typed command lines are
refused with an ActionError naming the action and the rule, before the harness runs them; the
same actions pass on a harness that draws its desktop. Shipping a guarded class by value to a fresh
interpreter is tests/integration/harness/test_key_policy.py."""

from __future__ import annotations

import pytest

from harnesses.desktop import DesktopHarness
from vlrl.harness import Action, ActionError, Harness
from vlrl.harness.key_policy import DENIED_CHORDS, KeyPolicy, chord, chord_setting

DENIED = [
    ("ctrl", "alt", "delete"),
    ("ctrl", "alt", "backspace"),
    ("alt", "f4"),
    ("alt", "tab"),
    ("meta",),
    ("meta", "r"),
    ("ctrl", "alt", "f1"),
    ("ctrl", "alt", "f12"),
    ("ctrl", "alt", "shift", "delete"),  # another key held does not make it another chord
    ("ctrl", "alt", "T"),  # a letter in either case
]
ALLOWED = [("ctrl", "s"), ("ctrl", "shift", "n"), ("enter",), ("f2",), ("alt", "f"), ("ctrl", "alt")]


class RealDesktop(DesktopHarness):
    """The drawn desktop standing in for a real one: only the flag differs."""

    real_desktop = True


class Recording(Harness):
    """Records the actions its own ``step`` ran."""

    real_desktop = True
    ran: list[Action] = []

    def reset(self, *, seed=None, options=None):
        raise NotImplementedError

    def step(self, action):
        self.ran.append(action)
        return None, 0.0, False, False, {}

    def close(self):
        pass


@pytest.fixture(params=[RealDesktop, DesktopHarness], ids=["real", "drawn"])
def harness(request):
    instance = request.param(width=320, height=240, tasks=("type-field",))
    instance.reset(seed=1)
    yield instance
    instance.close()


@pytest.mark.parametrize("keys", DENIED, ids="+".join)
def test_system_chords_are_refused_on_a_real_desktop_only(harness, keys):
    if not harness.real_desktop:
        harness.step(Action.key(*keys))  # a drawn desktop has no session to end
        return
    with pytest.raises(ActionError, match=r"key .* is refused on this desktop \(rule 'system chord': .*\)") as error:
        harness.step(Action.key(*keys))
    assert "+".join(keys) in str(error.value)


@pytest.mark.parametrize("keys", ALLOWED, ids="+".join)
def test_ordinary_chords_pass(keys):
    KeyPolicy().check(Action.key(*keys))


def test_a_typed_line_is_refused_unless_the_task_runs_commands(harness):
    if harness.real_desktop:
        with pytest.raises(ActionError, match=r"type 'rm -rf ~\\n' is refused on this desktop \(rule 'no commands'"):
            harness.step(Action.type("rm -rf ~\n"))
    else:
        harness.step(Action.type("rm -rf ~\n"))
    harness.step(Action.type("a name, no newline"))
    KeyPolicy(commands=True).check(Action.type("ls > listing.txt\n"))


def test_a_refused_action_never_reaches_the_harness():
    harness, Recording.ran = Recording(), []
    with pytest.raises(ActionError):
        harness.step(Action.key("alt", "f4"))
    harness.step(Action.key("ctrl", "s"))
    assert Recording.ran == [Action.key("ctrl", "s")]


def test_an_allow_list_lets_exactly_its_chords_through():
    policy = KeyPolicy(allowed=chord_setting("test", "allow_chords", ["alt+tab"]))
    policy.check(Action.key("alt", "tab"))
    with pytest.raises(ActionError, match="system chord"):
        policy.check(Action.key("alt", "shift", "tab"))
    with pytest.raises(ActionError, match="system chord"):
        policy.check(Action.key("alt", "f4"))


def test_a_harness_may_turn_the_rules_off():
    class Unguarded(Recording):
        def key_policy(self):
            return None

    Unguarded().step(Action.key("ctrl", "alt", "delete"))


@pytest.mark.parametrize("value", ["alt+tab", ["alt+"], ["alt+nope"], [3]])
def test_a_bad_chord_setting_names_the_setting(value):
    with pytest.raises(ValueError, match="test harness setting allow_chords"):
        chord_setting("test", "allow_chords", value)


def test_every_denied_chord_is_pressable():
    for rule in DENIED_CHORDS:
        assert chord(Action.key(*sorted(rule)).keys) == rule
