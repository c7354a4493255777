"""The key and text policy of harnesses that drive a real desktop.

Model output becomes typed actions only, but on a real OS some keystrokes still reach further
than the task: a chord that ends the session, switches to a virtual terminal or opens a system
menu, or a line typed into a terminal, which runs as a command. Harmless in a browser page or a
drawn desktop; not on an X session or a VM. A harness that drives one says so
(``Harness.real_desktop``), and every action it is given is checked against its
``key_policy()`` before its ``step`` runs. A refused action raises ``ActionError`` naming the
action and the rule, so it is an invalid action for the agent (the episode goes on, the next
turn's note says why) and is never executed. Two rules:

1. ``system chord``: a key action whose keys hold one of ``denied`` (extra keys held with it do
   not make it another chord: ctrl+alt+shift+delete is ctrl+alt+delete), unless the chord is in
   ``allowed`` exactly.
2. ``no commands``: typed text holding a newline, unless the task runs commands (a terminal
   task whose shell runs inside the harness's sandbox).

The rules keep the obvious system shortcuts and typed command lines out; the isolation itself
(a display, a home folder and processes of the instance's own) is the harness's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vlrl.harness.actions import NAMED_KEYS, Action
from vlrl.harness.errors import ActionError

Chord = frozenset[str]


def chord(keys: Iterable[str]) -> Chord:
    """Keys pressed together, in any order; a letter in either case."""
    return frozenset(key.lower() if len(key) == 1 else key for key in keys)


DENIED_CHORDS: frozenset[Chord] = frozenset(
    chord(keys)
    for keys in (
        ("ctrl", "alt", "delete"), ("ctrl", "alt", "backspace"), ("ctrl", "alt", "t"), ("ctrl", "alt", "l"),
        ("alt", "f4"), ("alt", "tab"), ("alt", "f1"), ("alt", "f2"), ("meta",),
        *(("ctrl", "alt", f"f{i}") for i in range(1, 13)),
    )
)  # fmt: skip
"""Session and system shortcuts: log out or reboot, kill the X server, open a terminal, lock the
screen, close the window under test, switch windows, the run dialog and system menus, every
super-key combination, and the switch to a virtual terminal."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyPolicy:
    """What keys and typed text a real desktop lets through."""

    denied: frozenset[Chord] = DENIED_CHORDS
    """Chords refused, with any other keys held too."""

    allowed: frozenset[Chord] = frozenset()
    """Chords let through although a denied one matches them (a harness's allow-list setting)."""

    commands: bool = False
    """Whether typed text may hold a newline: only where the task's terminal runs commands inside
    the sandbox."""

    def check(self, action: Action) -> None:
        """Raise ``ActionError`` for an action this policy refuses."""
        if not isinstance(action, Action):
            return  # not an action at all: the harness's own check refuses it
        if action.kind == "key":
            held = chord(action.keys)
            matched = [rule for rule in self.denied if rule <= held]
            if matched and held not in self.allowed:
                raise ActionError(
                    f"key {'+'.join(action.keys)} is refused on this desktop (rule 'system chord': "
                    f"{_name(min(matched, key=len))} is a session or system shortcut)"
                )
        if action.kind == "type" and not self.commands and "\n" in (action.text or ""):
            raise ActionError(
                f"type {action.text[:40]!r} is refused on this desktop (rule 'no commands': typed text "
                "with a newline runs a command line, and this task's sandbox runs no commands)"
            )


def chord_setting(harness: str, name: str, value: object) -> frozenset[Chord]:
    """Chords written as 'alt+tab' (a harness's allow-list setting), or a ``ValueError`` naming it."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{harness} harness setting {name}={value!r}; expected a list of chords such as 'alt+tab'")
    chords = []
    for text in value:
        keys = text.split("+") if isinstance(text, str) else []
        if not keys or not all(key in NAMED_KEYS or (len(key) == 1 and key.isprintable()) for key in keys):
            raise ValueError(
                f"{harness} harness setting {name}: {text!r} is not a chord; expected key names joined by '+' "
                f"('alt+tab'), each a printable character or one of {sorted(NAMED_KEYS)}"
            )
        chords.append(chord(keys))
    return frozenset(chords)


def _name(rule: Chord) -> str:
    order = ("ctrl", "alt", "shift", "meta")
    return "+".join(sorted(rule, key=lambda key: (order.index(key) if key in order else len(order), key)))
