"""``HarnessEnv``: one vlrl harness instance as a ``gymnasium.Env``.

Observations and actions are the spaces of ``vlrl.gym.spaces``, sized from the screen of a first
(unseeded) reset at construction, since Gymnasium needs the spaces before the first ``reset``.
``reset(seed=...)`` seeds the harness, so the same seed gives the same episode; ``terminated``,
``truncated`` and the reward are the harness's own, and ``info`` is the harness's plus its
accessibility tree and URL where it has them. ``render()`` (``render_mode="rgb_array"``) returns
the last screenshot.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from vlrl.gym.spaces import action_space, decode, encode, observation_space
from vlrl.harness import HarnessError, Observation, make


class HarnessEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    """``harness`` is a registered vlrl harness id, ``task`` one of its families (None: the harness
    draws one per episode, or ``reset(options={"task": ...})`` names it); the other keyword
    arguments are the harness's settings."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 1}
    """A screen changes only when the agent acts: a recording shows one step a second."""

    def __init__(self, harness: str, task: str | None = None, render_mode: str | None = None, **settings: Any) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}; a vlrl harness env renders only 'rgb_array' (or None)")
        self.harness_id, self.task, self.render_mode = harness, task, render_mode
        self.harness = make(harness, **settings)
        try:
            if task is not None and task not in self.harness.tasks:
                raise ValueError(f"harness {harness!r} has no task {task!r}; its tasks are {list(self.harness.tasks)}")
            probe, _ = self.harness.reset(options=self._options(None))
        except BaseException:
            self.harness.close()
            raise
        self.width, self.height = probe.width, probe.height
        self.observation_space = observation_space(self.width, self.height)
        self.action_space = action_space(self.width, self.height)
        self._screen: np.ndarray | None = None  # set by reset: stepping the probe episode is an error

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.harness.reset(seed=seed, options=self._options(options))
        return self._observe(obs), self._info(obs, info)

    def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._screen is None:
            raise HarnessError(f"vlrl/{self.harness_id} env: step before reset; call reset first")
        obs, reward, terminated, truncated, info = self.harness.step(decode(action))
        return self._observe(obs), float(reward), terminated, truncated, self._info(obs, info)

    def render(self) -> np.ndarray | None:
        if self.render_mode is None or self._screen is None:
            return None
        return self._screen.copy()

    def oracle(self) -> dict[str, Any] | None:
        """The harness's scripted next action, encoded in the action space (None: it has none)."""
        action = self.harness.oracle()
        return None if action is None else encode(action)

    def close(self) -> None:
        self.harness.close()

    def _options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        options = dict(options or {})
        if self.task is not None and options.setdefault("task", self.task) != self.task:
            raise ValueError(
                f"this env plays only task {self.task!r} (got {options['task']!r}); "
                f"make vlrl/{self.harness_id}-v0 to choose the task per reset"
            )
        return options

    def _observe(self, obs: Observation) -> dict[str, Any]:
        if (obs.width, obs.height) != (self.width, self.height):
            raise HarnessError(
                f"harness {self.harness_id!r} returned a {obs.width}x{obs.height} screenshot; "
                f"its gym observation space is {self.width}x{self.height}"
            )
        self._screen = obs.screenshot
        return {"screenshot": obs.screenshot, "goal": obs.goal or ""}

    @staticmethod
    def _info(obs: Observation, info: dict[str, Any]) -> dict[str, Any]:
        extra = {name: getattr(obs, name) for name in ("a11y_tree", "url") if getattr(obs, name) is not None}
        return {**info, **extra}
