"""Fork and replay (``vlrl.harness.fork``): the Pillow desktop's fork is the same state and
independent of its original; replay gives the recorded screens; a harness that diverges under
replay, or whose fork shares state, is caught with the turn or the rule named."""

from __future__ import annotations

import copy
import itertools
import pickle

import numpy as np
import pytest

from harnesses.desktop import DesktopHarness
from vlrl.harness import Action, Harness, HarnessContractError, HarnessError, check_harness
from vlrl.harness.fork import EpisodeRecord, ReplayDivergence, forks, replay, state_of

_instances = itertools.count()


class DriftsOnSecondInstance(DesktopHarness):
    """Every other instance draws one pixel differently from its second step on: the same seed
    and actions no longer give the same screens."""

    def __init__(self, **settings):
        super().__init__(**settings)
        self.nth = next(_instances)

    def step(self, action):
        obs, *rest = super().step(action)
        if self.nth % 2 and self._steps >= 2:
            pixels = obs.screenshot.copy()
            pixels[0, 0] = 255 - pixels[0, 0]
            obs = type(obs)(screenshot=pixels, goal=obs.goal)
        return (obs, *rest)


class ShallowFork(DesktopHarness):
    """A fork that shares the episode's widgets with its original."""

    def fork(self):
        return copy.copy(self)


def _record(harness, seed, task, moves):
    obs, _ = harness.reset(seed=seed, options={"task": task})
    actions, states = [], [state_of(obs)]
    for _ in range(moves):
        action = harness.oracle()
        obs, _, terminated, truncated, _ = harness.step(action)
        actions.append(action)
        states.append(state_of(obs))
        if terminated or truncated:
            break
    return EpisodeRecord(seed, {"task": task}, tuple(actions), tuple(states))


def test_replay_reaches_every_recorded_screen():
    record = _record(DesktopHarness(), 5, "fill-form", 4)
    assert len(record.states) == 5 and len(set(record.states)) > 2  # the screens changed on the way
    other = DesktopHarness()
    for turn in range(len(record.states)):
        obs, info = replay(other, record, turn)
        assert state_of(obs) == record.states[turn]
    assert info["task"] == "fill-form"


def test_a_diverging_replay_names_the_turn():
    first, second = DriftsOnSecondInstance(), DriftsOnSecondInstance()
    record = _record(first if first.nth % 2 == 0 else second, 5, "fill-form", 4)
    drifting = second if second.nth % 2 else first
    replay(drifting, record, 1)  # before the drift: the same
    with pytest.raises(ReplayDivergence, match="replay diverged at turn 2") as caught:
        replay(drifting, record, 3)
    assert caught.value.turn == 2 and caught.value.expected == record.states[2]
    again = pickle.loads(pickle.dumps(caught.value))  # it crosses Ray from the env host whole
    assert (type(again), again.turn, str(again)) == (ReplayDivergence, 2, str(caught.value))


def test_a_replay_whose_episode_ends_early_is_a_divergence():
    record = _record(DesktopHarness(), 5, "fill-form", 3)
    wrong = EpisodeRecord(record.seed, record.options, (Action.fail("stop"), *record.moves[1:]), record.states)
    with pytest.raises(ReplayDivergence, match="turn 1: the episode ended after move 0"):
        replay(DesktopHarness(), wrong, 2)


def test_record_and_turn_are_checked():
    with pytest.raises(ValueError, match="states has 1 entries; expected one per move"):
        EpisodeRecord(0, None, (Action.wait(), Action.wait(), Action.wait()), ("a",))
    with pytest.raises(ValueError, match="replay turn=3; expected 0..1"):
        replay(DesktopHarness(), EpisodeRecord(0, None, (Action.wait(),), ("a", "b")), 3)


def test_the_desktop_fork_is_the_same_state_and_independent():
    harness = DesktopHarness()
    harness.reset(seed=5, options={"task": "fill-form"})
    harness.step(harness.oracle())
    twin = harness.fork()
    assert forks(harness) and not forks(Harness)
    moves = []
    for _ in range(3):
        moves.append(twin.oracle())
        twin_obs = twin.step(moves[-1])[0]
    assert harness.episode.scene is not twin.episode.scene
    for move in moves:  # the twin's three steps left the original where it was
        obs = harness.step(move)[0]
    assert state_of(obs) == state_of(twin_obs) and np.array_equal(obs.screenshot, twin_obs.screenshot)


def test_a_harness_without_fork_says_to_replay():
    class NoFork(DesktopHarness):
        fork = Harness.fork  # the contract's default

    with pytest.raises(HarnessError, match="does not fork; replay it"):
        NoFork().fork()
    assert not forks(NoFork)


def test_the_checker_catches_a_diverging_replay_and_a_shared_fork():
    with pytest.raises(HarnessContractError, match=r"rule 'replay': .* replay diverged at turn 2"):
        check_harness(DriftsOnSecondInstance)
    with pytest.raises(HarnessContractError, match="rule 'fork': the original, sent move 1"):
        check_harness(ShallowFork, settings={"tasks": ("fill-form",)})  # typing twice into a shared field shows
