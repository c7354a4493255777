"""The harness contract, gymnasium-shaped.

``reset(seed=..., options=...) -> (Observation, info)`` starts an episode (the same seed and
options give the same episode); ``step(action) -> (Observation, reward, terminated, truncated,
info)`` applies one typed action; ``close()`` frees what the instance holds (windows, browser
processes) and may be called more than once. ``terminated`` means the task reached an end
(solved, failed, or the agent said ``done``/``fail``); ``truncated`` means a step limit cut it.
``info`` carries at least ``"task"`` and, from ``step``, ``"success"``: whether the task is solved.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from vlrl.harness.actions import Action
from vlrl.harness.observation import Observation

StepResult = tuple[Observation, float, bool, bool, dict[str, Any]]


class Harness(ABC):
    tasks: ClassVar[tuple[str, ...]] = ()
    """Task families; ``reset(options={"task": name})`` picks one (default: drawn from the seed)."""

    thread_bound: ClassVar[bool] = False
    """True when the instance must only be used from the thread that created it (sync Playwright);
    env hosts then give each instance a dedicated thread."""

    @abstractmethod
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observation, dict[str, Any]]:
        """Start an episode."""

    @abstractmethod
    def step(self, action: Action) -> StepResult:
        """Apply one action to the current episode."""

    @abstractmethod
    def close(self) -> None:
        """Free the instance's resources; idempotent."""

    def oracle(self) -> Action | None:
        """The next action of a scripted policy that solves the current episode, if the harness has one
        (used for demonstrations and tests, never during RL)."""
        return None
