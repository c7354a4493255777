"""The key index of a distributed store, sharded over a few long-lived Ray actors.

Each ``StoreShard`` indexes the keys that hash to it. For ``RayStore`` it is also the *owner* of
those keys' payload objects: in Ray an object dies with the process that put it, and Ray >= 2.56
no longer lets a writer name another owner, so writers hand their chunks to the shard, which
``ray.put``s them itself. Payloads thus outlive the (possibly short-lived or crashed) writer and
any actor in the cluster can read them straight from the object store.

A shard that dies is restarted by Ray, empty: the payloads it owned died with it. Calls in
flight at its death raise ``ShardLostError`` naming it; afterwards it serves new writes as
before, and as a *successor* index (``KeyIndex(successor=True)``) it answers a read of a key it
does not know with ``ShardLostError`` (the key may have been lost with its predecessor) and
skips releases of references it never held, so the driver fails exactly the groups whose
payloads are gone while the run goes on. Before it serves anything, a successor has every other
shard drop the references held for the keys it lost (an image's references to its tile packs,
which would otherwise outlive it: ``KeyIndex.drop_held_for``). Every call waits at most
``timeout_s`` (``StoreTimeoutError``), so a stuck or restarting shard never hangs its callers.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError

from vlrl.store.errors import ShardLostError, StoreError, StoreTimeoutError
from vlrl.store.fields import FieldSpec
from vlrl.store.index import KeyIndex, NewKey, StoreStats, shard_of, went_while_written

RAY_NAMESPACE = "vlrl"
INLINE_BYTES = 4096
"""Chunks this small (an image manifest, a reward) are kept in the shard, not as Ray objects:
a Ray object costs a round trip to its owner to read, more than the bytes themselves."""


@ray.remote(num_cpus=0, max_concurrency=8, max_restarts=-1, concurrency_groups={"siblings": 1})
class StoreShard:
    """Index of one key shard, and owner of the payload objects ``write`` receives."""

    def __init__(self, position: int, names: list[str], timeout_s: float) -> None:
        successor = ray.get_runtime_context().was_current_actor_reconstructed
        self._keys = KeyIndex(successor=successor)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        if successor:  # on a thread: shards restarting together ask each other
            args = (position, names, timeout_s)
            threading.Thread(target=self._drop_held_for_lost_keys, args=args, daemon=True).start()
        else:
            self._ready.set()

    def _drop_held_for_lost_keys(self, position: int, names: list[str], timeout_s: float) -> None:
        """Have every other shard drop the references held for the keys this shard lost, then
        serve: a writer whose key lands here afterwards finds its earlier references dropped (and
        fails) rather than kept for nobody. A shard that does not answer in ``timeout_s`` is dead
        or restarting (then it lost its references too): skipped."""
        try:
            calls = []
            for name in names[:position] + names[position + 1 :]:
                try:
                    shard = ray.get_actor(name, namespace=RAY_NAMESPACE)
                except ValueError:  # killed for good: nothing of it to drop
                    continue
                calls.append(shard.drop_held_for.remote(position, len(names)))
            for call in calls:
                with contextlib.suppress(GetTimeoutError, RayActorError):
                    ray.get(call, timeout=timeout_s)
        finally:
            self._ready.set()

    def call(self, method: str, args: tuple, kwargs: dict) -> tuple[bool, Any]:
        # Store errors travel back as values so that the caller re-raises the original type.
        self._ready.wait()
        try:
            with self._lock:
                return True, getattr(self._keys, method)(*args, **kwargs)
        except ShardLostError as error:  # only a successor raises it: name the shard
            return False, ShardLostError(f"store shard {ray.get_runtime_context().get_actor_name()!r}: {error}")
        except StoreError as error:
            return False, error

    @ray.method(concurrency_group="siblings")
    def drop_held_for(self, position: int, shards: int) -> int:
        """``KeyIndex.drop_held_for``, for a restarted sibling (in a group of its own, so that it is
        served while calls wait for this shard's own drop): the keys it deletes (tile packs) are
        payloads this actor owns, freed as their handles go; returns how many went."""
        with self._lock:
            return len(self._keys.drop_held_for(position, shards))

    def write(
        self, key: str, specs: dict[str, FieldSpec], chunks: dict[str, list[np.ndarray]], new_key: bool, refs: NewKey | None
    ) -> tuple[bool, Any, dict[str, Any]]:
        """Reserve, ``ray.put`` every chunk (so this actor owns it), then commit under the
        reservation's token. Answers ``(ok, value, dropped)``: ``value`` is None when written, the
        shared key's state when a shared key that existed got a reference instead (nothing is put),
        or the error. A failed write aborts here; ``dropped`` is what its key held or was to hold
        (on any shard: the client releases it). A write whose key went meanwhile lands nowhere (its
        objects go with this call). A chunk of at most ``INLINE_BYTES`` stays in the index itself:
        a read gets it with the lookup, no object fetch."""
        ok, reserved = self.call("reserve", (key, specs), {"new_key": new_key, "refs": refs})
        if not ok:
            return ok, reserved, {}
        token, state = reserved
        if token is None:
            return True, state, {}
        try:
            handles = {
                name: [chunk if chunk.nbytes <= INLINE_BYTES else ray.put(chunk) for chunk in parts]
                for name, parts in chunks.items()
            }
        except Exception as error:
            ok, dropped = self.call("abort", (key, token), {})
            failed = error if isinstance(error, StoreError) else StoreError(f"store key {key!r}: write failed: {error!r}")
            return False, failed, dropped if ok else {}
        ok, committed = self.call("commit", (key, handles, token), {})
        if not ok:
            return ok, committed, {}
        return (True, None, {}) if committed else (False, went_while_written(key), {})


class ShardedIndex:
    """Client side of the shards: routes each key to its shard and merges multi-key answers."""

    def __init__(self, name: str, shards: int, *, timeout_s: float) -> None:
        self._names = [f"{name}/{i}" for i in range(shards)]
        self._shards = [
            StoreShard.options(name=n, namespace=RAY_NAMESPACE, get_if_exists=True).remote(i, self._names, timeout_s)
            for i, n in enumerate(self._names)
        ]
        self._timeout_s = timeout_s

    def position(self, key: str) -> int:
        """Which shard indexes (and owns the payload of) ``key``."""
        return shard_of(key, len(self._shards))

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "stats":
            parts = [self._ask(position, method) for position in range(len(self._shards))]
            return StoreStats(
                keys=sum(p.keys for p in parts),
                bytes=sum(p.bytes for p in parts),
                written=sum(p.written for p in parts),
                bytes_put=sum(p.bytes_put for p in parts),
            )
        if method in ("take_back", "held_for_refs"):  # a writer's keys and references may be on every shard
            return [pair for position in range(len(self._shards)) for pair in self._ask(position, method, *args)]
        if method in ("lookup", "contains", "share", "take", "states", "holds_as"):  # a key's repeats all go to its one shard
            return self._scatter(method, args[0], *args[1:], **kwargs)
        if method in ("holds", "release", "release_held"):  # (key, holder) pairs, each to its key's shard
            return self._scatter(method, args[0], key_of=lambda ref: ref[0])
        if method == "delete":
            keys = args[0]
            if not kwargs.get("missing_ok"):  # every shard checks before any deletes
                self._scatter("check_deletable", keys)
            return self._scatter(method, keys, missing_ok=True)
        return self._ask(self.position(args[0]), method, *args, **kwargs)

    def write(
        self, key: str, specs: dict[str, FieldSpec], chunks: dict[str, list[np.ndarray]], new_key: bool, refs: NewKey | None
    ) -> tuple[bool, Any, dict[str, Any]]:
        """``StoreShard.write`` on the key's shard, its answer as it is (the caller frees what a
        failed write dropped before it raises)."""
        position = self.position(key)
        return self.get(self._shards[position].write.remote(key, specs, chunks, new_key, refs), position)

    def kill(self) -> None:
        for shard in self._shards:
            ray.kill(shard)

    def get(self, refs: Any, owners: int | list[int]) -> Any:
        """``ray.get`` of calls to shards, or of objects they own, bounded by the call timeout.
        ``owners`` is the shard position of every ref (or one for all); a dead shard, or an object
        lost with it, raises ``ShardLostError`` naming that shard."""
        try:
            return ray.get(refs, timeout=self._timeout_s)
        except GetTimeoutError:
            names = sorted({self._names[p] for p in ([owners] if isinstance(owners, int) else owners)})
            raise StoreTimeoutError(f"store shard(s) {names} did not answer within {self._timeout_s:g} s") from None
        except (RayActorError, ObjectLostError) as error:
            owner = owners
            if not isinstance(owners, int):  # the lost object names its shard
                hexes = [ref.hex() for ref in refs]
                owner = owners[hexes.index(error.object_ref_hex)] if error.object_ref_hex in hexes else owners[0]
            raise ShardLostError(
                f"store shard {self._names[owner]!r} died: payload lost for every key it held "
                f"({type(error).__name__}; it restarts empty)"
            ) from None

    def _ask(self, position: int, method: str, *args: Any, **kwargs: Any) -> Any:
        ok, value = self.get(self._shards[position].call.remote(method, args, kwargs), position)
        if not ok:
            raise value
        return value

    def _scatter(
        self, method: str, keys: list[Any], *args: Any, key_of: Callable[[Any], str] = str, **kwargs: Any
    ) -> list[Any]:
        """Ask each shard about its keys (in parallel) and return answers in the order of ``keys``
        (items that ``key_of`` maps to a key)."""
        by_shard: dict[int, list[int]] = defaultdict(list)
        for position, item in enumerate(keys):
            by_shard[self.position(key_of(item))].append(position)
        pending = {
            shard: self._shards[shard].call.remote(method, ([keys[p] for p in positions], *args), kwargs)
            for shard, positions in by_shard.items()
        }
        out: list[Any] = [None] * len(keys)
        for shard, ref in pending.items():
            ok, value = self.get(ref, shard)
            if not ok:
                raise value
            for position, answer in zip(by_shard[shard], value or ()):
                out[position] = answer
        return out
