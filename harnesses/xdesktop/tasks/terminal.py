"""Terminal families on xterm: the agent runs a command in a shell in the sandbox home, and the
evaluator reads the file the command was to write.

The terminal is deterministic on screen: a fixed font (``-fa Monospace -fs 10``, fontconfig's
DejaVu Sans Mono), a fixed size and title, and bash without startup files, whose prompt ``~$``
shows the folder and nothing of the machine. These are the only families whose key policy lets
typed text hold a newline (``Episode(commands=True)``): a typed line runs, inside the sandbox.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from harnesses.xdesktop.session import XSession
from harnesses.xdesktop.tasks.base import Episode, read_text, wait_for_window
from harnesses.xdesktop.words import WORDS, name, phrase
from vlrl.harness import Action, HarnessError

TERMINAL_TITLE = "Terminal"
XTERM = (
    "xterm", "-fa", "Monospace", "-fs", "10", "-geometry", "80x24", "-T", TERMINAL_TITLE,
    "-e", "env", "PS1=\\w$ ", "HISTFILE=", "bash", "--norc", "--noprofile", "-i",
)  # fmt: skip
"""xterm running an interactive bash with no rc files (so no machine-specific prompt)."""

FOCUS_TIMEOUT_S = 5.0
EXTENSIONS = ("txt", "md", "csv", "log")


class RunAndSave:
    """Run the given command, whose output goes to a named file; check reads that file."""

    name = "terminal-run-save"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        command, output, path = _command(rng, session.home)
        _open_terminal(session)
        return Episode(
            family=self.name,
            goal=f"In the terminal, run the command `{command}`.",
            check=lambda s: _same_text(read_text(path), output),
            oracle=(Action.type(f"{command}\n"),),
            commands=True,
        )


class ListToFile:
    """Save a folder's listing to ``listing.txt``; check compares it with the real folder. A
    second folder with other files sits next to it, so listing the wrong one fails."""

    name = "terminal-list-to-file"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        folder, other = (session.home / folder for folder in _distinct_names(rng, 2))
        for path in (folder, other):
            path.mkdir()
            for stem in rng.sample(WORDS, rng.randint(3, 5)):
                (path / f"{stem}.{rng.choice(EXTENSIONS)}").write_text(f"{phrase(rng)}\n")
        listing = session.home / "listing.txt"
        command = f"ls {folder.name} > {listing.name}"
        _open_terminal(session)
        return Episode(
            family=self.name,
            goal=(
                f"In the terminal, save the list of files in the folder {folder.name} to {listing.name} "
                f"(run `{command}`)."
            ),
            check=_listing_matches(listing, folder),
            oracle=(Action.type(f"{command}\n"),),
            commands=True,
        )


def _command(rng: random.Random, home: Path) -> tuple[str, str, Path]:
    """A seeded command, the text it writes, and the file it writes it to (in ``home``)."""
    path = home / f"{rng.choice(WORDS)}.txt"
    words = rng.sample(WORDS, 3)
    match rng.randrange(4):
        case 0:
            return f"echo {' '.join(words)} > {path.name}", f"{' '.join(words)}\n", path
        case 1:
            return f"echo {' '.join(words)} | tr a-z A-Z > {path.name}", f"{' '.join(words).upper()}\n", path
        case 2:
            low = rng.randint(1, 20)
            high = low + rng.randint(2, 5)
            return f"seq {low} {high} > {path.name}", "".join(f"{n}\n" for n in range(low, high + 1)), path
        case _:
            return f"printf '%s\\n' {' '.join(words)} > {path.name}", "".join(f"{w}\n" for w in words), path


def _distinct_names(rng: random.Random, count: int) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        candidate = name(rng)
        if candidate not in names:
            names.append(candidate)
    return names


def _same_text(text: str | None, wanted: str) -> bool:
    """The file holds ``wanted`` (trailing newlines aside); a missing file never does."""
    return text is not None and text.rstrip("\n") == wanted.rstrip("\n")


def _listing_matches(listing: Path, folder: Path) -> Callable[[XSession], bool]:
    """Whether ``listing`` names exactly the entries of ``folder`` as it is now, one a line (in
    any order: ``ls`` and ``ls -1`` sort, other listings may not)."""

    def check(session: XSession) -> bool:
        text = read_text(listing)
        if text is None or not folder.is_dir():
            return False
        entries = sorted(p.name for p in folder.iterdir())
        return bool(entries) and sorted(line for line in text.split("\n") if line) == entries

    return check


def _open_terminal(session: XSession) -> int:
    """Launch xterm in the sandbox home and wait until it has the keyboard focus (openbox gives a
    new window focus; typed text goes wherever the focus is)."""
    session.launch(XTERM)
    window = wait_for_window(session, f"^{TERMINAL_TITLE}$")
    deadline = time.monotonic() + FOCUS_TIMEOUT_S
    while time.monotonic() < deadline:
        done = subprocess.run(["xdotool", "getwindowfocus"], env=session.env(), capture_output=True, text=True)
        if done.stdout.strip() == str(window):
            return window
        time.sleep(0.05)
    raise HarnessError(
        f"the terminal on {session.display} did not get the keyboard focus within {FOCUS_TIMEOUT_S:.0f} s"
    )
