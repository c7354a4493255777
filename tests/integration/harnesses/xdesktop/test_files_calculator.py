"""The file-manager (PCManFM) and calculator (Galculator) families: on held-out seeds the oracle
solves every episode, each evaluator rejects a wrong final state (written into the sandbox or
made through the GUI), and a seed's first screen does not depend on what the instance ran before."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from harnesses.xdesktop import XDesktopHarness
from harnesses.xdesktop.tasks.calculator import CONF, galculator_conf, read_conf
from vlrl.harness import Action

FAMILIES = ("files-rename", "files-create-folder", "files-move", "calc-compute-to-file", "calc-setting")
SEEDS = (100, 101, 102)


@pytest.fixture(scope="module")
def harness():
    instance = XDesktopHarness(tasks=FAMILIES, max_steps=20)
    yield instance
    instance.close()


def _start(harness, family: str, seed: int):
    obs, _ = harness.reset(seed=seed, options={"task": family})
    return obs.goal, harness._session, harness._episode


def _quoted(goal: str) -> list[str]:
    return re.findall(r'"([^"]+)"', goal)


def _folder(session):
    """The folder the episode opened: the one folder in ~/Documents."""
    (folder,) = (session.home / "Documents").iterdir()
    return folder


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_oracle_solves_held_out_seeds(harness, family, seed):
    harness.reset(seed=seed, options={"task": family})
    for _ in range(harness.max_steps):
        _, reward, terminated, truncated, info = harness.step(harness.oracle())
        if terminated or truncated:
            break
    assert info["success"] is True and reward == 1.0 and terminated


@pytest.mark.parametrize("seed", SEEDS)
def test_rename_rejects_another_name_a_copy_and_other_contents(harness, seed):
    goal, session, episode = _start(harness, "files-rename", seed)
    old, new = _quoted(goal)
    folder = _folder(session)
    assert not episode.check(session)
    shutil.copy(folder / old, folder / new)  # a copy: the old name is still there
    assert not episode.check(session)
    (folder / old).unlink()
    assert episode.check(session)
    (folder / new).write_text("other text\n")
    assert not episode.check(session)


def test_rename_through_the_gui_to_a_wrong_name_fails(harness):
    goal, session, _ = _start(harness, "files-rename", SEEDS[0])
    old, new = _quoted(goal)
    wrong = "wrong-" + new
    for action in (Action.type(old), Action.key("escape"), Action.key("f2"), Action.key("ctrl", "a")):
        harness.step(action)
    harness.step(Action.type(wrong))
    _, reward, _, _, info = harness.step(Action.key("enter"))
    assert (_folder(session) / wrong).is_file()  # the GUI did rename it, to the wrong name
    assert info["success"] is False and reward == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_create_folder_rejects_a_file_or_another_name(harness, seed):
    goal, session, episode = _start(harness, "files-create-folder", seed)
    name = _quoted(goal)[0]
    folder = _folder(session)
    assert not episode.check(session)
    (folder / name).write_text("")  # a file, not a folder
    assert not episode.check(session)
    (folder / name).unlink()
    (folder / (name + "2")).mkdir()
    assert not episode.check(session)
    (folder / (name + "2")).rename(folder / name)
    assert episode.check(session)


@pytest.mark.parametrize("seed", SEEDS)
def test_move_rejects_not_moved_copied_or_the_wrong_folder(harness, seed):
    goal, session, episode = _start(harness, "files-move", seed)
    moved, into = _quoted(goal)
    folder = _folder(session)
    (other,) = [p for p in folder.iterdir() if p.is_dir() and p.name != into]
    assert not episode.check(session)  # not moved
    shutil.copy(folder / moved, folder / into / moved)
    assert not episode.check(session)  # copied, still in its old place
    (folder / into / moved).unlink()
    (folder / moved).rename(other / moved)
    assert not episode.check(session)  # into the other folder
    (other / moved).rename(folder / into / moved)
    assert episode.check(session)


def _value(goal: str) -> int:
    expression = re.search(r"compute (\S+), then", goal).group(1)
    assert re.fullmatch(r"[0-9+\-*()]+", expression)
    return eval(expression)  # digits, + - * and parentheses only (checked above)


@pytest.mark.parametrize("seed", SEEDS)
def test_compute_to_file_rejects_a_wrong_number(harness, seed):
    goal, session, episode = _start(harness, "calc-compute-to-file", seed)
    value = _value(goal)
    path = session.home / "Documents" / _quoted(goal)[0]
    assert path.read_text() == "" and not episode.check(session)  # the empty file
    for wrong in (f"{value + 1}\n", f"{value} apples\n", f"{-value}\n", "x"):
        path.write_text(wrong)
        assert not episode.check(session), wrong
    path.write_text(f"{value}\n")
    assert episode.check(session)


@pytest.mark.parametrize("seed", SEEDS)
def test_setting_rejects_quitting_with_the_setting_unchanged(harness, seed):
    _, session, episode = _start(harness, "calc-setting", seed)
    before = read_conf(session)
    assert not episode.check(session)
    _, reward, _, _, info = harness.step(Action.key("ctrl", "q"))  # quit without changing it
    after = read_conf(session)
    assert "display_result_font" in after and after["mode"] == before["mode"]  # Galculator wrote it
    assert info["success"] is False and reward == 0.0


def test_setting_is_read_from_galculators_config_file(harness):
    goal, session, episode = _start(harness, "calc-setting", SEEDS[1])
    assert "hexadecimal" in goal
    (session.home / CONF).write_text(galculator_conf(mode=1, default_number_base=2))  # octal
    assert not episode.check(session)
    (session.home / CONF).write_text(galculator_conf(mode=1, default_number_base=1))
    assert episode.check(session)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_seed_shows_the_same_first_screen_after_other_episodes(harness, family):
    first, _ = harness.reset(seed=SEEDS[0], options={"task": family})
    harness.reset(seed=7, options={"task": "files-move"})
    for _ in range(4):
        harness.step(harness.oracle())  # the pointer and the last apps end up elsewhere
    again, _ = harness.reset(seed=SEEDS[0], options={"task": family})
    assert again.goal == first.goal
    assert np.array_equal(again.screenshot, first.screenshot)
