"""The key index of a distributed store, sharded over a few long-lived Ray actors.

Each ``StoreShard`` indexes the keys that hash to it. For ``RayStore`` it is also the *owner* of
those keys' payload objects: in Ray an object dies with the process that put it, and Ray >= 2.56
no longer lets a writer name another owner, so writers hand their chunks to the shard, which
``ray.put``s them itself. Payloads thus outlive the (possibly short-lived or crashed) writer and
any actor in the cluster can read them straight from the object store.
"""

from __future__ import annotations

import threading
import zlib
from collections import defaultdict
from typing import Any

import numpy as np
import ray

from vlrl.store.errors import KeyMissingError, StoreError
from vlrl.store.fields import FieldSpec
from vlrl.store.index import KeyIndex, StoreStats

RAY_NAMESPACE = "vlrl"


@ray.remote(num_cpus=0, max_concurrency=8)
class StoreShard:
    """Index of one key shard, and owner of the payload objects ``write`` receives."""

    def __init__(self) -> None:
        self._keys = KeyIndex()
        self._lock = threading.Lock()

    def call(self, method: str, args: tuple, kwargs: dict) -> tuple[bool, Any]:
        # Store errors travel back as values so that the caller re-raises the original type.
        try:
            with self._lock:
                return True, getattr(self._keys, method)(*args, **kwargs)
        except StoreError as error:
            return False, error

    def write(
        self, key: str, specs: dict[str, FieldSpec], chunks: dict[str, list[np.ndarray]], new_key: bool
    ) -> tuple[bool, Any]:
        """Reserve, ``ray.put`` every chunk (so this actor owns it), then commit."""
        ok, error = self.call("reserve", (key, specs), {"new_key": new_key})
        if not ok:
            return ok, error
        try:
            refs = {name: [ray.put(chunk) for chunk in parts] for name, parts in chunks.items()}
        except BaseException:
            self.call("abort", (key, list(specs)), {})
            raise
        return self.call("commit", (key, refs), {})


class ShardedIndex:
    """Client side of the shards: routes each key to its shard and merges multi-key answers."""

    def __init__(self, name: str, shards: int) -> None:
        self._shards = [
            StoreShard.options(name=f"{name}/{i}", namespace=RAY_NAMESPACE, get_if_exists=True).remote()
            for i in range(shards)
        ]

    def shard_of(self, key: str) -> Any:
        return self._shards[zlib.crc32(key.encode()) % len(self._shards)]

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "stats":
            parts = [self._ask(shard, method) for shard in self._shards]
            return StoreStats(keys=sum(p.keys for p in parts), bytes=sum(p.bytes for p in parts))
        if method in ("lookup", "contains", "share", "release"):  # a key's repeats all go to its one shard
            return self._scatter(method, args[0], *args[1:], **kwargs)
        if method == "delete":
            keys = args[0]
            if not kwargs.get("missing_ok"):
                absent = [k for k, present in zip(keys, self._scatter("contains", keys)) if not present]
                if absent:
                    raise KeyMissingError(f"cannot delete store key(s) {absent[:5]}: not written or already deleted")
            return self._scatter(method, keys, missing_ok=True)
        return self._ask(self.shard_of(args[0]), method, *args, **kwargs)

    def write(self, key: str, specs: dict[str, FieldSpec], chunks: dict[str, list[np.ndarray]], new_key: bool) -> None:
        ok, value = ray.get(self.shard_of(key).write.remote(key, specs, chunks, new_key))
        if not ok:
            raise value

    def kill(self) -> None:
        for shard in self._shards:
            ray.kill(shard)

    def _ask(self, shard: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        ok, value = ray.get(shard.call.remote(method, args, kwargs))
        if not ok:
            raise value
        return value

    def _scatter(self, method: str, keys: list[str], *args: Any, **kwargs: Any) -> list[Any]:
        """Ask each shard about its keys (in parallel) and return answers in the order of ``keys``."""
        by_shard: dict[int, list[int]] = defaultdict(list)
        for position, key in enumerate(keys):
            by_shard[zlib.crc32(key.encode()) % len(self._shards)].append(position)
        pending = {
            shard: self._shards[shard].call.remote(method, ([keys[p] for p in positions], *args), kwargs)
            for shard, positions in by_shard.items()
        }
        out: list[Any] = [None] * len(keys)
        for shard, ref in pending.items():
            ok, value = ray.get(ref)
            if not ok:
                raise value
            for position, answer in zip(by_shard[shard], value):
                out[position] = answer
        return out
