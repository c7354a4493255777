"""The key and text policy of a harness that drives a real desktop.

Model output becomes typed actions only, but on a real OS some keystrokes still reach further
than the task: a chord that ends the session or opens a system menu, or a line typed into a
terminal that runs as a command. The sandbox declares what it allows; everything else is refused
with an ``ActionError`` (a counted invalid action for the agent, never executed).
"""

from __future__ import annotations

from dataclasses import dataclass

from vlrl.harness import Action, ActionError

DENIED_CHORDS: frozenset[frozenset[str]] = frozenset(
    frozenset(chord)
    for chord in (
        ("ctrl", "alt", "delete"), ("ctrl", "alt", "backspace"), ("alt", "f4"), ("meta",), ("meta", "r"),
        ("meta", "l"), ("meta", "e"), ("ctrl", "alt", "t"), ("alt", "tab"), ("alt", "f2"),
        *(("ctrl", "alt", f"f{i}") for i in range(1, 13)),
    )
)  # fmt: skip
"""Chords refused on a real desktop: session, window-manager and system shortcuts (virtual
terminals, run dialogs, closing the window under test)."""


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """What a task's sandbox allows."""

    commands: bool = False
    """Whether typed text may hold a newline: only where the task's terminal runs commands inside
    the sandbox."""

    def check(self, action: Action) -> None:
        """Raise ``ActionError`` for an action the sandbox does not allow."""
        if action.kind == "key" and frozenset(action.keys) in DENIED_CHORDS:
            raise ActionError(f"key {'+'.join(action.keys)} is refused on this desktop (a system shortcut)")
        if action.kind == "type" and not self.commands and "\n" in (action.text or ""):
            raise ActionError("typed text with a newline is refused here: this task's sandbox runs no commands")
