"""Follow a harness's oracle through an episode."""

from __future__ import annotations

from vlrl.harness import Action, Harness


def play(harness: Harness) -> list[tuple[Action, float, bool, bool, dict]]:
    """Step with the oracle's actions until the episode ends; each (action, reward, terminated,
    truncated, info)."""
    transitions = []
    while True:
        action = harness.oracle()
        _, reward, terminated, truncated, info = harness.step(action)
        transitions.append((action, reward, terminated, truncated, info))
        if terminated or truncated:
            return transitions
