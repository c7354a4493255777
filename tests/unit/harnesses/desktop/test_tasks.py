"""Every family is solvable by its oracle, cannot be won by doing nothing useful, ends at once on
a wrong move, and is deterministic in its seed."""

from __future__ import annotations

import random

import numpy as np
import pytest

from harnesses.desktop import DesktopHarness
from harnesses.desktop.tasks.base import click, on_icon
from vlrl.harness import Action

FAMILIES = DesktopHarness.tasks
SEEDS = range(20)


def run_oracle(harness: DesktopHarness) -> tuple[float, int, dict]:
    """Follow the oracle to the end; return the last reward, the steps taken and the last info."""
    for steps in range(1, harness.settings.max_steps + 1):
        _, reward, terminated, truncated, info = harness.step(harness.oracle())
        if terminated or truncated:
            return reward, steps, info
    raise AssertionError("episode neither terminated nor truncated")


@pytest.mark.parametrize("task", FAMILIES)
def test_oracle_solves_every_seed(harness, task):
    for seed in SEEDS:
        harness.reset(seed=seed, options={"task": task})
        reward, steps, info = run_oracle(harness)
        assert (reward, info["success"]) == (1.0, True), f"{task} seed {seed}: oracle failed after {steps} steps"


@pytest.mark.parametrize(
    "settings",
    [
        {"width": 160, "height": 120, "distractors": 5},
        {"width": 640, "height": 360, "distractors": 0},
        {"width": 1920, "height": 120, "distractors": 5},
    ],
)
def test_oracle_solves_other_screens_and_decoy_counts(settings):
    harness = DesktopHarness(**settings)
    for task in FAMILIES:
        for seed in range(3):
            harness.reset(seed=seed, options={"task": task})
            assert run_oracle(harness)[0] == 1.0, f"{task} seed {seed} {settings}"


def _random_action(rng: random.Random, w: int, h: int) -> Action:
    x, y = rng.randrange(w), rng.randrange(h)
    return rng.choice(
        [
            Action.click(x, y), Action.move(x, y), Action.scroll(x, y, down=rng.choice((-3, 2))),
            Action.type(rng.choice(("abc", "x y", "42"))), Action.key(rng.choice(("tab", "backspace", "escape"))),
            Action.drag(x, y, rng.randrange(w), y), Action.right_click(x, y), Action.key("ctrl", "a"),
        ]
    )  # fmt: skip


@pytest.mark.parametrize("task", FAMILIES)
def test_oracle_recovers_after_random_actions(task):
    """The oracle acts from the current state, so it also finishes episodes someone else began."""
    harness = DesktopHarness(max_steps=30)
    rng, recovered = random.Random(task), 0
    for seed in range(12):
        harness.reset(seed=seed, options={"task": task})
        for _ in range(3):
            *_, terminated, _, _ = harness.step(_random_action(rng, 320, 240))
            if terminated:
                break
        else:
            reward, _, _ = run_oracle(harness)
            assert reward == 1.0, f"{task} seed {seed}: oracle did not recover"
            recovered += 1
    assert recovered > 0


@pytest.mark.parametrize("task", FAMILIES)
def test_useless_actions_earn_nothing(harness, task):
    for seed in range(10):
        harness.reset(seed=seed, options={"task": task})
        for action in (Action.click(318, 238), Action.wait(), Action.move(5, 235), Action.key("escape")):
            _, reward, terminated, truncated, info = harness.step(action)
            assert (reward, terminated, truncated, info["success"]) == (0.0, False, False, False)
        assert info["hit"] is None  # the taskbar is not a widget
        _, reward, terminated, *_ = harness.step(Action.done())
        assert (reward, terminated) == (0.0, True)


def test_random_agent_rarely_wins():
    harness, rng, wins = DesktopHarness(), random.Random(0), 0
    for task in FAMILIES:
        for seed in range(6):
            harness.reset(seed=seed, options={"task": task})
            terminated = truncated = False
            while not (terminated or truncated):
                _, reward, terminated, truncated, _ = harness.step(_random_action(rng, 320, 240))
            wins += reward
    assert wins / (6 * len(FAMILIES)) < 0.15


def _losing_step(harness: DesktopHarness) -> Action:
    """The next action of a losing path: open what must be opened, then pick the wrong thing."""
    task = harness.episode
    scene, popup = task.scene, task.scene.popup
    match task.name:
        case "click-target":
            return click(next(b for b in task.buttons if b is not task.target))
        case "select-menu" | "right-click-menu" if popup is not None:
            wanted = task.item if task.name == "select-menu" else task.action
            return Action.click(*popup.item_rect(next(i for i in popup.items if i != wanted)).center)
        case "select-menu":
            return click(task.menu)
        case "right-click-menu":
            return Action.right_click(*on_icon(scene, task.target))
        case "close-dialog":  # the front dialog: close it if it is another, else press one of its buttons
            front = scene.windows[-1]
            return click(front.close if front is not task.target else front.widgets[-1])
        case "scroll-find":
            return Action.click(*task.box.row_rect(task.box.items[0]).center)  # the target starts hidden
        case "fill-form":
            return click(task.submit)  # an empty form
        case "double-click-icon":
            return Action.double_click(*on_icon(scene, next(i for i in scene.icons if i is not task.target)))
    return click(scene.windows[0].close)  # every family fails once its window is gone


@pytest.mark.parametrize("task", FAMILIES)
def test_a_wrong_move_ends_the_episode_unrewarded(harness, task):
    for seed in range(5):
        harness.reset(seed=seed, options={"task": task})
        for _ in range(2):
            _, reward, terminated, _, info = harness.step(_losing_step(harness))
            if terminated:
                break
        assert (reward, terminated, info["success"]) == (0.0, True, False), f"{task} seed {seed}"


@pytest.mark.parametrize("task", FAMILIES)
def test_same_seed_same_episode_other_seed_other_layout(task):
    first, second = DesktopHarness(), DesktopHarness()
    shots = []
    for seed in range(6):
        a, _ = first.reset(seed=seed, options={"task": task})
        b, _ = second.reset(seed=seed, options={"task": task})
        assert a.screenshot.tobytes() == b.screenshot.tobytes() and a.goal == b.goal
        shots.append(a.screenshot)
    assert len({shot.tobytes() for shot in shots}) == len(shots)


def test_seedless_resets_continue_the_seeded_stream():
    first, second = DesktopHarness(), DesktopHarness()
    seeded, _ = first.reset(seed=7)
    second.reset(seed=7)
    a, b = first.reset()[0], second.reset()[0]
    assert np.array_equal(a.screenshot, b.screenshot)
    assert not np.array_equal(a.screenshot, seeded.screenshot)
