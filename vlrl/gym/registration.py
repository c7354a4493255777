"""Gymnasium ids for the registered vlrl harnesses: ``vlrl/{harness}-v0`` (every task family) and
``vlrl/{harness}-{task}-v0`` (one family).

Gymnasium 1.x has no plug-in entry points (0.x read a ``gymnasium.envs`` group; 1.0 dropped it),
so the ids are registered when ``vlrl.gym`` is imported, or by ``gymnasium.make("vlrl.gym:<id>")``,
which imports it first. Listing a harness's families imports its module (never an instance: no
browser starts); the built-in ones add about 0.4 s. A harness whose module does
not import here (an optional dependency missing) gets only its ``-v0`` id, and making that id
raises the import error. A harness registered later needs another ``register_envs()``.
"""

from __future__ import annotations

import gymnasium as gym

from vlrl.harness import HarnessError, registered, resolve

ENTRY_POINT = "vlrl.gym.env:HarnessEnv"


def register_envs() -> list[str]:
    """Register the ids of every registered harness not yet in Gymnasium's registry; return them."""
    added = []
    for harness_id in registered():
        added += _register(f"vlrl/{harness_id}-v0", {"harness": harness_id})
        try:
            tasks = getattr(resolve(harness_id), "tasks", ())
        except HarnessError:
            continue
        for task in tasks:
            added += _register(f"vlrl/{harness_id}-{task}-v0", {"harness": harness_id, "task": task})
    return added


def _register(env_id: str, kwargs: dict[str, str]) -> list[str]:
    if env_id in gym.registry:
        return []
    gym.register(env_id, entry_point=ENTRY_POINT, kwargs=kwargs)
    return [env_id]
