"""File-manager families on PCManFM: the evaluator lists the real folder in the sandbox.

Every episode opens PCManFM on ``~/Documents/<Folder>``, a folder of a few seeded files (each
with its own seeded text) and one or two subfolders. What the screen shows is the same for every
instance for the same seed:

- the title is the folder's name only, and the toolbar with its path bar (which would show the
  sandbox's temporary path) is hidden through PCManFM's own config (``toolbar=hidden;``);
- the status bar (free disk space changes over time) is hidden too;
- every entry has the same fixed modification time (a hover tooltip shows it);
- the pointer is parked in the screen's corner, away from any icon it could highlight.

The oracle drives PCManFM with keys: typing a name selects that entry (the view's type-ahead
search; ``escape`` closes the search box and keeps the selection), F2 renames the selection,
``ctrl+shift+n`` makes a folder, ``ctrl+x`` / ``ctrl+v`` move a file, ``enter`` opens a folder.
Each check reads the folder's real listing and the moved or renamed file's contents.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from harnesses.xdesktop.session import XSession
from harnesses.xdesktop.tasks.base import Episode, read_text, wait_for_window
from harnesses.xdesktop.words import WORDS, phrase
from vlrl.harness import Action

FOLDERS = (
    "Projects",
    "Reports",
    "Archive",
    "Notes",
    "Drafts",
    "Photos",
    "Music",
    "Invoices",
)
EXTENSIONS = ("txt", "md", "csv", "log")
FIXED_MTIME = 1_700_000_000
"""2023-11-14: every entry of an episode's folder shows this modification time."""
APP_TIMEOUT_S = 60.0
"""How long an application may take to show its window: a bound on a hang, not a speed (two
shared cores start GTK slowly; beside a whole test suite a file manager once took over 20 s)."""

_PCMANFM_CONF = """[config]
bm_open_method=0

[volume]
mount_on_startup=0
mount_removable=0
autorun=0

[ui]
always_show_tabs=0
win_width=640
win_height=480
splitter_pos=150
side_pane_mode=places
view_mode=icon
show_hidden=0
sort=name;ascending;
toolbar=hidden;
show_statusbar=0
pathbar_mode_buttons=1
"""
"""PCManFM's profile: no toolbar or path bar (the sandbox path), no status bar (free space), icons
sorted by name."""


@dataclass(frozen=True, slots=True)
class Folder:
    """The folder an episode opens: its path and what it holds at the start."""

    path: Path
    files: dict[str, str]
    """File name -> its text."""
    subfolders: tuple[str, ...]

    def listing(self) -> set[str]:
        return {*self.files, *self.subfolders}


def listing(path: Path) -> set[str] | None:
    """The names in a folder, or None when it is not a folder."""
    try:
        return {entry.name for entry in path.iterdir()}
    except OSError:
        return None


def open_folder(rng: random.Random, session: XSession, *, files: int = 4, subfolders: int = 1) -> Folder:
    """Make a seeded folder in ``~/Documents``, open PCManFM on it and wait for its window."""
    name = rng.choice(FOLDERS)
    words = rng.sample(WORDS, files + subfolders)
    # Distinct first words: typing a name selects exactly that entry.
    folder = Folder(
        path=session.home / "Documents" / name,
        files={f"{word}.{rng.choice(EXTENSIONS)}": phrase(rng) + "\n" for word in words[:files]},
        subfolders=tuple(words[files:]),
    )
    folder.path.mkdir(parents=True)
    for file_name, text in folder.files.items():
        (folder.path / file_name).write_text(text)
    for sub in folder.subfolders:
        (folder.path / sub).mkdir()
    for entry in [*folder.path.iterdir(), folder.path]:
        os.utime(entry, (FIXED_MTIME, FIXED_MTIME))
    profile = session.home / ".config/pcmanfm/default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "pcmanfm.conf").write_text(_PCMANFM_CONF)
    session.launch(["pcmanfm", str(folder.path)])
    wait_for_window(session, f"^{name}$", timeout_s=APP_TIMEOUT_S)
    return folder


def select(name: str) -> tuple[Action, Action]:
    """Select the entry called ``name`` by typing it (type-ahead), then close the search box."""
    return Action.type(name), Action.key("escape")


class RenameFile:
    """Rename a given file to a given name (select it, F2, type the new name, enter)."""

    name = "files-rename"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        folder = open_folder(rng, session)
        old = rng.choice(sorted(folder.files))
        unused = [w for w in WORDS if not any(entry.startswith(w) for entry in folder.listing())]
        new = f"{rng.choice(unused)}.{old.rsplit('.', 1)[1]}"
        expected = folder.listing() - {old} | {new}
        text = folder.files[old]

        def check(session: XSession) -> bool:
            return listing(folder.path) == expected and read_text(folder.path / new) == text

        return Episode(
            family=self.name,
            goal=f'In the file manager, rename the file "{old}" to "{new}".',
            check=check,
            oracle=(
                *select(old),
                Action.key("f2"),
                Action.key("ctrl", "a"),
                Action.type(new),
                Action.key("enter"),
            ),
        )


class CreateFolder:
    """Create a folder of a given name in the open folder (ctrl+shift+n, type the name, enter)."""

    name = "files-create-folder"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        folder = open_folder(rng, session, subfolders=rng.randint(0, 1))
        unused = [w for w in WORDS if not any(entry.startswith(w) for entry in folder.listing())]
        new = rng.choice(unused)
        expected = folder.listing() | {new}

        def check(session: XSession) -> bool:
            return listing(folder.path) == expected and listing(folder.path / new) == set()

        return Episode(
            family=self.name,
            goal=f'In the file manager, create a new empty folder named "{new}" in the folder "{folder.path.name}".',
            check=check,
            oracle=(
                Action.key("ctrl", "shift", "n"),
                Action.key("ctrl", "a"),
                Action.type(new),
                Action.key("enter"),
            ),
        )


class MoveFile:
    """Move a given file into a given subfolder (cut it, open the subfolder, paste)."""

    name = "files-move"

    def setup(self, rng: random.Random, session: XSession) -> Episode:
        folder = open_folder(rng, session, subfolders=2)
        moved = rng.choice(sorted(folder.files))
        into = rng.choice(folder.subfolders)
        text = folder.files[moved]
        expected = folder.listing() - {moved}

        def check(session: XSession) -> bool:
            return (
                listing(folder.path) == expected
                and listing(folder.path / into) == {moved}
                and read_text(folder.path / into / moved) == text
            )

        return Episode(
            family=self.name,
            goal=f'In the file manager, move the file "{moved}" into the folder "{into}".',
            check=check,
            oracle=(
                *select(moved),
                Action.key("ctrl", "x"),
                *select(into),
                Action.key("enter"),
                Action.key("ctrl", "v"),
            ),
        )
