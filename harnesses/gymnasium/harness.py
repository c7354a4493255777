"""``GymnasiumHarness``: any Gymnasium env with image observations as a vlrl harness.

An instance makes ``env_id`` (``frames`` says where its screen comes from, ``actions`` how typed
actions reach it) and plays it as one task family named by the id. The screenshot is the env's
frame, resized to ``width`` x ``height`` when they are set. A reset seeds the env; a step maps the
action, steps the env and passes its reward, ``terminated`` and ``truncated`` on, truncating after
``max_steps`` too. ``info["success"]`` is the env's own ``success`` or ``is_success`` where it
reports one, else False (its reward is then the only signal). Where the env does not take them,
``wait`` leaves the env untouched, ``done`` ends the episode keeping the last success and
``fail`` ends it unsolved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from PIL import Image

from harnesses.gymnasium.actions import VlrlActions, action_map
from harnesses.gymnasium.frames import Frames
from vlrl.harness import Action, ActionError, Harness, HarnessError, Observation, StepResult, int_setting

DEFAULT_ENV = "vlrl/desktop-click-target-v0"
"""The env of an instance built without settings (``vlrl check harness gymnasium``): one every
install has, a vlrl harness through the Gymnasium bridge and back."""
SIZE_RANGE = (16, 4096)


class GymnasiumHarness(Harness):
    """``env_id`` is a Gymnasium id (``"module:id"`` imports the module first); ``env_kwargs``
    go to ``gymnasium.make``; ``goal`` is the instruction when the observations carry none;
    ``keys`` names the actions of a ``Discrete`` space (``actions``); ``image_key`` picks the
    screen among several images of a ``Dict`` observation."""

    tasks: ClassVar[tuple[str, ...]] = ()
    """Per instance: the env id, its only task."""

    def __init__(
        self,
        *,
        env_id: str = DEFAULT_ENV,
        env_kwargs: Mapping[str, Any] | None = None,
        width: int | None = None,
        height: int | None = None,
        max_steps: int = 100,
        goal: str | None = None,
        keys: Mapping[str, int] | None = None,
        image_key: str | None = None,
    ) -> None:
        if not isinstance(env_id, str) or not env_id:
            raise ValueError(f"gymnasium harness setting env_id={env_id!r}; expected a Gymnasium env id")
        if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
            raise ValueError(f"gymnasium harness setting env_kwargs={env_kwargs!r}; expected a mapping or None")
        if goal is not None and (not isinstance(goal, str) or not goal):
            raise ValueError(f"gymnasium harness setting goal={goal!r}; expected a non-empty string or None")
        sizes = {
            name: int_setting("gymnasium", name, value, *SIZE_RANGE)
            for name, value in (("width", width), ("height", height))
            if value is not None
        }
        self.max_steps = int_setting("gymnasium", "max_steps", max_steps, 1, 100_000)
        self.env_id, self.tasks = env_id, (env_id,)
        self.goal = goal or f"Get the highest reward in {env_id}."
        self._env: gym.Env[Any, Any] | None
        self._env, self._frames = _open(env_id, dict(env_kwargs or {}), image_key)
        try:
            probe, _ = self._env.reset()
            native = Observation(screenshot=np.ascontiguousarray(self._frame(probe)))
            self.width, self.height = sizes.get("width", native.width), sizes.get("height", native.height)
            meanings = getattr(self._env.unwrapped, "get_action_meanings", None)
            self._actions = action_map(
                env_id,
                self._env.action_space,
                (self.width, self.height),
                keys=keys,
                meanings=None if meanings is None else list(meanings()),
            )
        except BaseException:
            self.close()
            raise
        self._obs: Any = None
        self._steps, self._ended, self._success = 0, False, False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        options = dict(options or {})
        unknown = sorted(set(options) - {"task"})
        if unknown:
            raise ValueError(f"reset options {unknown} are unknown; the gymnasium harness takes only 'task'")
        if options.get("task", self.env_id) != self.env_id:
            raise ValueError(f"reset task {options['task']!r} is not this harness's task; expected {self.env_id!r}")
        self._obs, _ = self._live().reset(seed=seed)
        self._steps, self._ended, self._success = 0, False, False
        return self._observe(), {"task": self.env_id, "success": False}

    def step(self, action: Action) -> StepResult:
        env = self._running()
        if not isinstance(action, Action):
            raise ActionError(f"step expects a vlrl.harness.Action, got {type(action).__name__}")
        action.check_bounds(self.width, self.height)
        if self._actions.passes_control or action.kind not in ("wait", "done", "fail"):
            self._obs, reward, terminated, truncated, env_info = env.step(self._actions.env_action(action))
            self._success = bool(env_info.get("success", env_info.get("is_success", False)))
        else:
            reward, terminated, truncated, env_info = 0.0, action.kind != "wait", False, {}
            self._success = self._success and action.kind != "fail"
        self._steps += 1
        truncated = bool(truncated) or (not terminated and self._steps >= self.max_steps)
        self._ended = bool(terminated) or truncated
        info = {"task": self.env_id, "success": self._success, "steps": self._steps, "env": env_info}
        return self._observe(), float(reward), bool(terminated), truncated, info

    def oracle(self) -> Action | None:
        """The wrapped env's scripted action, where it is a vlrl harness behind the bridge."""
        env = self._running()
        oracle = getattr(env.unwrapped, "oracle", None)
        if not isinstance(self._actions, VlrlActions) or oracle is None:
            return None
        env_action = oracle()
        return None if env_action is None else self._actions.from_env(env_action)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def _live(self) -> gym.Env[Any, Any]:
        if self._env is None:
            raise HarnessError(f"gymnasium harness {self.env_id!r}: used after close")
        return self._env

    def _running(self) -> gym.Env[Any, Any]:
        env = self._live()
        if self._obs is None:
            raise HarnessError(f"gymnasium harness {self.env_id!r}: step before reset; call reset first")
        if self._ended:
            raise HarnessError(
                f"gymnasium harness {self.env_id!r}: the episode has ended; call reset before stepping again"
            )
        return env

    def _frame(self, obs: Any) -> np.ndarray:
        return self._frames.frame(obs, self._live())

    def _observe(self) -> Observation:
        frame = self._frame(self._obs)
        if frame.shape[:2] != (self.height, self.width):
            frame = np.asarray(Image.fromarray(frame).resize((self.width, self.height), Image.Resampling.BILINEAR))
        return Observation(screenshot=np.ascontiguousarray(frame), goal=self._frames.goal(self._obs) or self.goal)


def _open(env_id: str, kwargs: dict[str, Any], image_key: str | None) -> tuple[gym.Env[Any, Any], Frames]:
    """The env and where its frames come from; made again with ``render_mode="rgb_array"`` when
    its observations hold no image."""
    env = _make(env_id, kwargs)
    try:
        frames = Frames.of(env.observation_space, image_key)
        if frames.rendered:
            if "rgb_array" not in env.metadata.get("render_modes", ()):
                raise HarnessError(
                    f"gymnasium harness setting env_id={env_id!r}: its observations hold no (H, W, 3) uint8 "
                    "image and it does not render rgb_array frames"
                )
            env.close()
            env = _make(env_id, {**kwargs, "render_mode": "rgb_array"})
    except BaseException:
        env.close()
        raise
    return env, frames


def _make(env_id: str, kwargs: dict[str, Any]) -> gym.Env[Any, Any]:
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.Error as error:
        raise HarnessError(f"gymnasium harness setting env_id={env_id!r}: Gymnasium cannot make it: {error}") from error
