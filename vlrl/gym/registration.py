"""Gymnasium ids for the registered vlrl harnesses: ``vlrl/{harness}-v0`` (every task family) and
``vlrl/{harness}-{task}-v0`` (one family).

Gymnasium 1.x has no plug-in entry points (0.x read a ``gymnasium.envs`` group; 1.0 dropped it),
so the ids are registered when ``vlrl.gym`` is imported, or by ``gymnasium.make("vlrl.gym:<id>")``,
which imports it first; a harness registered after that gets its ids as it is registered (the
harness registry tells this module). Listing a harness's families imports its module (never an
instance: no browser starts); the built-in ones add about 0.4 s. A harness whose module does not
import here (an optional dependency missing) gets only its ``-v0`` id, and making that id raises
the import error.

Each spec's ``max_episode_steps`` is the harness's default step limit (its ``max_steps`` setting's
default, read from the constructor's signature or its ``Config``), so ``gymnasium.make`` wraps the
env in a ``TimeLimit`` that agrees with the harness's own truncation. A ``max_steps=N`` setting
passed to ``make`` needs ``max_episode_steps=N`` beside it, or the wrapper cuts at the default.
"""

from __future__ import annotations

import gymnasium as gym

from vlrl.harness import HarnessError, registered
from vlrl.harness.checker import factory_rules
from vlrl.harness.registry import REGISTRY
from vlrl.harness.settings import declared_int_default
from vlrl.registry import ContractError

ENTRY_POINT = "vlrl.gym.env:HarnessEnv"


def register_envs() -> list[str]:
    """Register the ids of every registered harness not yet in Gymnasium's registry; return them."""
    return [env_id for harness_id in registered() for env_id in _register_harness(harness_id)]


def _register_harness(harness_id: str) -> list[str]:
    try:
        factory = REGISTRY.load(REGISTRY.spec(harness_id))  # imported to list its families; make() checks it
        for _ in factory_rules(factory):  # the cheap rules (``tasks`` a tuple of names), not yet run on a path
            pass
    except (HarnessError, ContractError):
        return _register(f"vlrl/{harness_id}-v0", {"harness": harness_id}, None)
    limit = declared_int_default(factory, "max_steps")
    added = _register(f"vlrl/{harness_id}-v0", {"harness": harness_id}, limit)
    for task in getattr(factory, "tasks", ()):
        added += _register(f"vlrl/{harness_id}-{task}-v0", {"harness": harness_id, "task": task}, limit)
    return added


def _register(env_id: str, kwargs: dict[str, str], max_episode_steps: int | None) -> list[str]:
    if env_id in gym.registry:
        return []
    gym.register(env_id, entry_point=ENTRY_POINT, kwargs=kwargs, max_episode_steps=max_episode_steps)
    return [env_id]


REGISTRY.on_register(_register_harness)
