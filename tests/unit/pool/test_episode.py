"""``play_episode``'s per-move record: what each move earned and the state it was made in."""

from __future__ import annotations

import asyncio

import numpy as np

from vlrl.harness import Action, ActionError, Observation
from vlrl.pool.episode import Invalid, play_episode


class Steps:
    """An environment of three screens: a click at x=1 moves on (reward 0.5 per screen), x=9
    is refused; the third screen names its own state key."""

    def __init__(self):
        self.screen = 0

    def _obs(self):
        key = "checkout" if self.screen == 2 else None
        return Observation(screenshot=np.full((4, 4, 3), self.screen, np.uint8), goal="go", state_key=key)

    async def reset(self, *, seed, options=None):
        self.screen = 0
        return self._obs(), {"task": "t"}

    async def step(self, action):
        if action.x == 9:
            raise ActionError("off the screen")
        self.screen += 1
        return self._obs(), 0.5, self.screen == 3, False, {"success": self.screen == 3}


def test_each_move_records_its_reward_and_state_and_they_sum_to_the_episode_reward():
    moves = iter([Action.click(1, 0), Invalid("not an action"), Action.click(9, 0), Action.click(1, 0), Action.click(1, 0)])

    async def player(obs, note):
        return next(moves)

    episode = asyncio.run(play_episode(Steps(), player, seed=0, max_turns=10, invalid_penalty=0.1))
    assert episode.turn_rewards == (0.5, -0.1, -0.1, 0.5, 0.5)
    assert sum(episode.turn_rewards) == episode.reward and episode.success
    assert episode.turn_states == (None, None, None, None, "checkout")  # a refused move stays on its screen


def test_the_goal_opens_the_first_note_only_unless_it_is_repeated_every_turn():
    def notes(repeat_goal):
        moves = iter([Action.click(1, 0), Action.click(9, 0), Action.click(1, 0), Action.click(1, 0)])
        seen = []

        async def player(obs, note):
            seen.append(note)
            return next(moves)

        asyncio.run(play_episode(Steps(), player, seed=0, max_turns=10, invalid_penalty=0.1, repeat_goal=repeat_goal))
        return seen

    refused = "Invalid action: off the screen"
    assert notes(False) == ["go", "", refused, ""]
    assert notes(True) == ["go", "go", f"{refused}\ngo", "go"]
