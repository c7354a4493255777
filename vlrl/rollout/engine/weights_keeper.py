"""The latest pushed weights of one engine replica, kept where a restarted replica finds them.

Ray restarts a crashed replica in place (``max_restarts``) with the constructor arguments it was
first given, so the weights must come from elsewhere: each replica has a ``WeightsKeeper``, a tiny
named actor the pusher hands every new weights' object ref and version before the replica itself
(``TrainerGroup.push_weights(keepers=...)``), and a restarted replica loads what its keeper holds
before it serves anything. A keeper rather than a re-push on the next step: a replica that came
back between two pushes would otherwise serve the base weights (as version 0) until then. The
keeper lives as long as the replica's handle in the driver, and pins one copy of the latest
weights in the object store (under LoRA also the trainer's first push, the one with the whole base model). Every engine kind (embedded, vLLM) uses it the same way.
"""

from __future__ import annotations

import uuid
import weakref
from typing import Any

import ray


class WeightsKeeper:
    """The latest weights pushed to one replica, as an object ref and version (a Ray actor)."""

    def __init__(self) -> None:
        self._refs: list[ray.ObjectRef] = []
        self._version = 0

    def keep(self, refs: list[ray.ObjectRef], version: int) -> None:
        """``refs``: the weights' object refs, in a list so that Ray hands the refs, not the weights;
        one, or under LoRA the trainer's first push (the whole base model) and the latest."""
        if version > self._version:
            self._refs, self._version = refs, version

    def latest(self) -> tuple[list[ray.ObjectRef], int]:
        return self._refs, self._version


def start_keeper() -> tuple[str, Any]:
    """A new keeper actor: its name (what a replica's constructor takes, so a restart needs no
    stored handle) and its handle."""
    name = f"vlrl-weights-{uuid.uuid4().hex}"
    return name, ray.remote(WeightsKeeper).options(name=name, num_cpus=0).remote()


def keep_weights_of(engine: Any, keeper: Any) -> Any:
    """Record ``keeper`` as ``engine``'s (alive as long as the engine's handle); returns ``engine``."""
    _keepers[engine] = keeper
    return engine


def weights_keeper(engine: Any) -> Any:
    """The ``WeightsKeeper`` of a replica this process built (None for other engines): give it
    every push (``TrainerGroup.push_weights(keepers=...)``)."""
    return _keepers.get(engine)


def latest_weights(keeper_name: str) -> tuple[Any, int]:
    """What the keeper named ``keeper_name`` holds: (state dict, version), or (None, 0) before any
    push. Several refs are read in order, a later one's tensors over an earlier one's."""
    refs, version = ray.get(ray.get_actor(keeper_name).latest.remote())
    state: dict[str, Any] = {}
    for weights in ray.get(refs):
        state.update(weights)
    return (state if refs else None), version


_keepers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""Handle of a replica built in this process -> its keeper's handle, which keeps the keeper alive
as long as the replica's handle (handles compare by actor id)."""
