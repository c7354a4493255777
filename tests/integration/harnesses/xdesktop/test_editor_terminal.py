"""Editor (Mousepad) and terminal (xterm) families: the oracle solves held-out seeds, every
evaluator reads the real state (a right state written by hand passes, near misses, missing files
and unsaved edits fail), and a seed gives the same screen on a fresh and a used instance."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harnesses.xdesktop import XDesktopHarness
from harnesses.xdesktop.tasks.base import wait_for_window, window_title
from tests.helpers.play import play
from vlrl.harness import Action

EDITOR = ("editor-write-save", "editor-edit-line", "editor-append-line", "editor-replace-word")
TERMINAL = ("terminal-run-save", "terminal-list-to-file")
SEEDS = (100, 101, 102)


@pytest.fixture(scope="module")
def harness():
    instance = XDesktopHarness(tasks=[*EDITOR, *TERMINAL])
    yield instance
    instance.close()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", [*EDITOR, *TERMINAL])
def test_oracle_solves_held_out_seeds(harness, family, seed):
    obs, info = harness.reset(seed=seed, options={"task": family})
    assert info["task"] == family and obs.goal
    transitions = play(harness)
    rewards = [reward for _, reward, *_ in transitions]
    _, _, terminated, truncated, info = transitions[-1]
    assert rewards[-1] == 1.0 and set(rewards[:-1]) <= {0.0}
    assert terminated and not truncated and info["success"]


# -- states written by hand: (label, writes the state into home, whether it solves the task)

State = tuple[str, Callable[[Path], None], bool]


def _document(harness) -> Path:
    """The file the episode's Mousepad window has open (its title names it)."""
    title = window_title(harness._session, wait_for_window(harness._session, "Mousepad"))
    return harness._session.home / "Documents" / title.removesuffix(" - Mousepad").lstrip("*")


def _write(path: Path, text: str) -> Callable[[Path], None]:
    return lambda home: path.write_text(text)


def _remove(path: Path) -> Callable[[Path], None]:
    return lambda home: path.unlink(missing_ok=True)


def _editor_states(family: str, goal: str, path: Path) -> list[State]:
    lines = path.read_text().rstrip("\n").split("\n") if path.exists() else []
    if family == "editor-write-save":
        (text,) = re.search(r'write "(.*)" and save', goal).groups()
        return [
            ("nothing saved", _remove(path), False),
            ("other text", _write(path, f"{text} again\n"), False),
            ("right text in another file", lambda home: (home / "Documents/other.txt").write_text(text), False),
            ("the text", _write(path, f"{text}\n"), True),
        ]
    if family == "editor-edit-line":
        k, text = re.search(r'replace line (\d+) of .* with "(.*)" and save', goal).groups()
        k = int(k) - 1
        right = [*lines[:k], text, *lines[k + 1 :]]
        wrong_line = [*lines[: k + 1], text, *lines[k + 2 :]] if k + 1 < len(lines) else [text, *lines[1:]]
        return [
            ("the file unchanged", _write(path, "\n".join(lines) + "\n"), False),
            ("another line replaced", _write(path, "\n".join(wrong_line) + "\n"), False),
            ("text inserted, line kept", _write(path, "\n".join([*lines[:k], text, *lines[k:]]) + "\n"), False),
            ("file deleted", _remove(path), False),
            ("the line replaced", _write(path, "\n".join(right) + "\n"), True),
        ]
    if family == "editor-append-line":
        (text,) = re.search(r'add the line "(.*)" at the end', goal).groups()
        return [
            ("the file unchanged", _write(path, "\n".join(lines) + "\n"), False),
            ("line added first", _write(path, "\n".join([text, *lines]) + "\n"), False),
            ("blank line before it", _write(path, "\n".join([*lines, "", text]) + "\n"), False),
            ("line added last", _write(path, "\n".join([*lines, text])), True),
        ]
    old, new = re.search(r'replace every "(.*)" in .* with "(.*)" and save', goal).groups()
    text = "\n".join(lines) + "\n"
    first_only = text.replace(old, new, 1)
    assert text.count(old) >= 2 and first_only != text.replace(old, new)
    return [
        ("the file unchanged", _write(path, text), False),
        ("only the first replaced", _write(path, first_only), False),
        ("word deleted", _write(path, text.replace(old, "")), False),
        ("every one replaced", _write(path, text.replace(old, new)), True),
    ]


def _other_folder(home: Path, folder: str) -> Path:
    """The decoy folder set up next to the one the goal names."""
    (other,) = (p for p in home.iterdir() if p.is_dir() and p.name[0] != "." and p.name not in ("Documents", folder))
    return other


def _terminal_states(family: str, goal: str, home: Path) -> list[State]:
    (command,) = re.search(r"`(.*)`", goal).groups()
    if family == "terminal-run-save":
        out = home / command.rsplit("> ", 1)[1]
        return [
            ("no file", _remove(out), False),
            ("empty file", _write(out, ""), False),
            ("other output", _write(out, "something else\n"), False),
        ]
    folder = home / re.search(r"ls (\S+) >", command).group(1)
    listing = home / "listing.txt"
    other = _other_folder(home, folder.name)
    names = sorted(p.name for p in folder.iterdir())
    return [
        ("no listing", _remove(listing), False),
        ("another folder's listing", _write(listing, "".join(f"{p.name}\n" for p in sorted(other.iterdir()))), False),
        ("one file missing", _write(listing, "".join(f"{n}\n" for n in names[1:])), False),
        ("the listing, reordered", _write(listing, "".join(f"{n}\n" for n in reversed(names))), True),
        ("a file added to the folder since", lambda home: (folder / "late.txt").write_text("late\n"), False),
    ]


@pytest.mark.parametrize("family", [*EDITOR, *TERMINAL])
def test_evaluator_reads_the_real_state(harness, family):
    obs, _ = harness.reset(seed=SEEDS[0], options={"task": family})
    session, episode = harness._session, harness._episode
    assert not episode.check(session), "the state at reset already passes"
    if family in EDITOR:
        states = _editor_states(family, obs.goal, _document(harness))
    else:
        states = _terminal_states(family, obs.goal, session.home)
    for label, write, solves in states:
        write(session.home)
        assert episode.check(session) is solves, f"{family}: state '{label}'"


@pytest.mark.parametrize("family", EDITOR)
def test_an_unsaved_edit_earns_nothing(harness, family):
    harness.reset(seed=SEEDS[1], options={"task": family})
    oracle = list(harness._episode.oracle)
    assert oracle[-1] == Action.key("ctrl", "s")
    for _ in oracle[:-1]:
        _, reward, terminated, truncated, info = harness.step(harness.oracle())
        assert (reward, terminated, info["success"]) == (0.0, False, False)
    _, reward, terminated, _, info = harness.step(Action.done())
    assert (reward, terminated, info["success"]) == (0.0, True, False)


@pytest.mark.parametrize("family", TERMINAL)
def test_a_wrong_command_earns_nothing(harness, family):
    obs, _ = harness.reset(seed=SEEDS[1], options={"task": family})
    (command,) = re.search(r"`(.*)`", obs.goal).groups()
    home = harness._session.home
    if family == "terminal-run-save":
        wrong = f"echo nothing > {command.rsplit('> ', 1)[1]}"
    else:
        folder = re.search(r"ls (\S+) >", command).group(1)
        other = _other_folder(home, folder).name
        wrong = f"ls {other} > listing.txt"
    _, reward, terminated, _, info = harness.step(Action.type(f"{wrong}\n"))
    assert (reward, terminated, info["success"]) == (0.0, False, False)
    assert list(home.glob("*.txt")), "the wrong command ran and wrote its file"
    _, reward, terminated, _, info = harness.step(Action.done())
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_a_seed_gives_the_same_screen_on_a_fresh_and_a_used_instance(harness):
    """No temp paths, clocks or leftovers of the last episode on screen (the used instance has
    just played other episodes; the fresh one has played none)."""
    fresh = XDesktopHarness(tasks=[*EDITOR, *TERMINAL])
    try:
        for family in (*EDITOR, *TERMINAL):
            used, _ = harness.reset(seed=SEEDS[2], options={"task": family})
            new, _ = fresh.reset(seed=SEEDS[2], options={"task": family})
            assert used.goal == new.goal, family
            assert np.array_equal(used.screenshot, new.screenshot), family
            play(harness)
    finally:
        fresh.close()
