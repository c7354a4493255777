"""The DOM oracle solves every default task in real Chromium: MiniWoB itself pays a positive reward."""

from __future__ import annotations

import pytest

from harnesses.miniwob import DEFAULT_TASKS


@pytest.mark.parametrize("task", DEFAULT_TASKS)
def test_oracle_reaches_positive_reward(harness, task):
    for seed in (0, 1, 2):
        obs, info = harness.reset(seed=seed, options={"task": task})
        assert info["task"] == task and obs.goal
        for _ in range(harness.config.max_steps):
            action = harness.oracle()
            assert action is not None, f"{task} seed {seed}: the oracle is lost on {obs.goal!r}"
            obs, reward, terminated, truncated, info = harness.step(action)
            if terminated or truncated:
                break
        assert terminated, f"{task} seed {seed}: not solved in {harness.config.max_steps} steps"
        assert 0 < reward <= info["raw_reward"] and info["success"], (task, seed, reward, info)
        assert harness.oracle() is None  # nothing left to do once the episode ended
