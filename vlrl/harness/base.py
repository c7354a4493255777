"""The harness contract, gymnasium-shaped.

``reset(seed=..., options=...) -> (Observation, info)`` starts an episode (the same seed and
options give the same episode); ``step(action) -> (Observation, reward, terminated, truncated,
info)`` applies one typed action; ``close()`` frees what the instance holds (windows, browser
processes) and may be called more than once. ``terminated`` means the task reached an end
(solved, failed, or the agent said ``done``/``fail``); ``truncated`` means a step limit cut it.
``info`` carries at least ``"task"`` and, from ``step``, ``"success"``: whether the task is solved.

A harness that drives a real desktop (``real_desktop``) has every action checked against its
``key_policy()`` before its ``step`` runs (``vlrl.harness.key_policy``). The check wraps each
subclass's ``step`` where the class is made, so it holds whoever steps the harness: an env host,
the Gymnasium adapter, the checker, a test.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from vlrl.harness.actions import Action
from vlrl.harness.errors import HarnessError
from vlrl.harness.key_policy import KeyPolicy
from vlrl.harness.observation import Observation

StepResult = tuple[Observation, float, bool, bool, dict[str, Any]]


class Harness(ABC):
    tasks: ClassVar[tuple[str, ...]] = ()
    """Task families; ``reset(options={"task": name})`` picks one (default: drawn from the seed)."""

    thread_bound: ClassVar[bool] = False
    """True when the instance must only be used from the thread that created it (sync Playwright);
    env hosts then give each instance a dedicated thread."""

    real_desktop: ClassVar[bool] = False
    """True when actions reach a real OS session (an X desktop, a VM), not a page or a drawing: its
    system shortcuts and typed command lines are then refused by ``key_policy()``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if callable(step) and not getattr(step, "__isabstractmethod__", False):
            cls.step = _checked(step)  # type: ignore[method-assign]

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

    def fork(self) -> Harness:
        """A new instance in this one's state, screen for screen, that goes on independently (a
        branching rollout's branches start from it). Override where the state can be copied; a
        harness that does not is replayed instead (``vlrl.harness.fork``), which needs only that
        the same seed, options and actions give the same screens."""
        raise HarnessError(f"{type(self).__name__} does not fork; replay it (vlrl.harness.fork.replay)")

    def key_policy(self) -> KeyPolicy | None:
        """The key and text rules of the current episode: the default deny list on a real desktop,
        none elsewhere. Override to allow more (an allow-list setting, a terminal task's commands),
        or return None to turn the rules off."""
        return KeyPolicy() if self.real_desktop else None


def _checked(step: Callable[[Harness, Action], StepResult]) -> Callable[[Harness, Action], StepResult]:
    """``step`` that first refuses what the instance's key policy refuses (with ``ActionError``)."""

    @functools.wraps(step)
    def checked_step(self: Harness, action: Action) -> StepResult:
        policy = self.key_policy()
        if policy is not None:
            policy.check(action)
        return step(self, action)

    return checked_step
