"""Text-editor families on Mousepad: the evaluator reads the saved file from the sandbox.

Every family but ``editor-write-save`` opens a seeded file of a few lines of words; the goal
names the change, and ``check`` compares the file on disk, line by line, with the file the goal
asks for (trailing newlines aside: saving with or without one is the same text). Nothing here
runs commands, so multi-line text is typed line by line with ``key("enter")`` between.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from harnesses.xdesktop.session import XSession
from harnesses.xdesktop.tasks.base import Episode, read_text, wait_for_window, window_geometry
from harnesses.xdesktop.words import WORDS, phrase
from vlrl.harness import Action

DOCUMENT_NAMES = ("notes", "todo", "draft", "memo")
LINES_RANGE = (3, 5)
"""How many lines an opened file has."""

REPLACE_DIALOG = "^Find and Replace$"
REPLACE_WITH_FIELD = (256, 62)
REPLACE_ALL_CHECKBOX = (20, 216)
REPLACE_ALL_BUTTON = (274, 256)
"""Points in Mousepad 0.5's Find and Replace dialog, relative to its client area's top-left
corner (the button is "Replace All" once the "Replace all in" box is ticked)."""


class WriteAndSave:
    """Type the given text into a new document and save it (ctrl+s writes the named file)."""

    name = "editor-write-save"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        text = phrase(rng)
        path = session.home / "Documents" / f"{rng.choice(DOCUMENT_NAMES)}.txt"
        session.launch(["mousepad", str(path)])
        wait_for_window(session, "Mousepad")
        return Episode(
            family=self.name,
            goal=f'In the text editor, write "{text}" and save the file.',
            check=lambda s: (read_text(path) or "").rstrip("\n") == text,
            oracle=(Action.type(text), Action.key("ctrl", "s")),
        )


class EditLine:
    """Replace one line of an opened file with the given text and save."""

    name = "editor-edit-line"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        lines = _lines(rng)
        k = rng.randrange(len(lines))
        text = phrase(rng)
        path = _open(rng, session, lines)
        wanted = [*lines[:k], text, *lines[k + 1 :]]
        return Episode(
            family=self.name,
            goal=(
                f'In the text editor, replace line {k + 1} of {path.name} ("{lines[k]}") with "{text}" '
                "and save the file."
            ),
            check=lambda s: _lines_of(path) == wanted,
            oracle=(
                Action.key("ctrl", "home"),
                *[Action.key("down")] * k,
                Action.key("shift", "end"),
                Action.type(text),
                Action.key("ctrl", "s"),
            ),
        )


class AppendLine:
    """Add the given line at the end of an opened file and save (the file ends in a newline, so
    ctrl+end lands on the empty line after the last one)."""

    name = "editor-append-line"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        lines = _lines(rng)
        text = phrase(rng)
        path = _open(rng, session, lines)
        wanted = [*lines, text]
        return Episode(
            family=self.name,
            goal=f'In the text editor, add the line "{text}" at the end of {path.name} and save the file.',
            check=lambda s: _lines_of(path) == wanted,
            oracle=(Action.key("ctrl", "end"), Action.type(text), Action.key("ctrl", "s")),
        )


class ReplaceWord:
    """Replace every occurrence of a word in an opened file with another and save. The word
    occurs two or three times; no word of ``WORDS`` is part of another, so replacing the
    substring is replacing the word."""

    name = "editor-replace-word"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        old, new = rng.sample(WORDS, 2)
        others = [word for word in WORDS if word not in (old, new)]
        lines = [rng.sample(others, rng.randint(3, 4)) for _ in range(rng.randint(*LINES_RANGE))]
        for row in rng.sample(range(len(lines)), rng.randint(2, 3)):
            lines[row][rng.randrange(len(lines[row]))] = old
        lines = [" ".join(words) for words in lines]
        path = _open(rng, session, lines)
        wanted = [line.replace(old, new) for line in lines]
        return Episode(
            family=self.name,
            goal=f'In the text editor, replace every "{old}" in {path.name} with "{new}" and save the file.',
            check=lambda s: _lines_of(path) == wanted,
            oracle=(
                Action.key("ctrl", "r"),
                Action.type(old),
                _in_window(REPLACE_DIALOG, *REPLACE_WITH_FIELD),
                Action.type(new),
                _in_window(REPLACE_DIALOG, *REPLACE_ALL_CHECKBOX),
                _in_window(REPLACE_DIALOG, *REPLACE_ALL_BUTTON),
                Action.key("escape"),
                Action.key("ctrl", "s"),
            ),
        )


def _lines(rng: random.Random) -> list[str]:
    return [phrase(rng) for _ in range(rng.randint(*LINES_RANGE))]


def _open(rng: random.Random, session: XSession, lines: list[str]) -> Path:
    """Write ``lines`` (newline-ended) to a seeded file in Documents and open it in Mousepad."""
    path = session.home / "Documents" / f"{rng.choice(DOCUMENT_NAMES)}.txt"
    path.write_text("".join(f"{line}\n" for line in lines))
    session.launch(["mousepad", str(path)])
    wait_for_window(session, f"^{path.name} - Mousepad$")
    return path


def _lines_of(path: Path) -> list[str] | None:
    """The file's lines, trailing newlines aside; None when it is missing."""
    text = read_text(path)
    return None if text is None else text.rstrip("\n").split("\n")


def _in_window(title: str, dx: int, dy: int) -> Callable[[XSession], Action]:
    """An oracle step: a click at ``(dx, dy)`` inside the window titled like ``title``."""

    def click(session: XSession) -> Action:
        x, y, _, _ = window_geometry(session, wait_for_window(session, title))
        return Action.click(x + dx, y + dy)

    return click
