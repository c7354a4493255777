"""Payload store on the Ray object store.

Each field is cut into chunks of ``chunk_rows`` rows and each chunk is its own Ray object, so a
column read fetches only that field's objects and a range read only the chunks it overlaps.

Ownership: a Ray object dies with the process that owns it, normally the writer (a rollout host
that may exit or crash). Writers therefore hand their chunks to the store's index shard for the
key (``remote_index.StoreShard``), which puts them and so owns them: payloads outlive their
writers and any actor in the cluster reads them straight from the object store. Shards hold
ObjectRefs and specs; readers never go through them for payload bytes.

Each run gets its own store: the default namespace is a fresh name chosen at the first build and
kept in the config, so everything built (or unpickled) from that config afterwards, trainer
workers included, joins the same store, while another run on the cluster never sees (or
destroys) it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import ray

from vlrl.config import Ge, Gt, NonEmpty
from vlrl.store.base import IndexedStore, RangeRead
from vlrl.store.errors import StoreStartupError
from vlrl.store.fields import FieldSpec, join_chunks, split_chunks
from vlrl.store.index import NewKey
from vlrl.store.remote_index import ShardedIndex


class RayStore(IndexedStore):
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Payloads in the Ray object store, readable from every actor of the cluster."""

        namespace: Annotated[str, NonEmpty()] | None = None
        """Stores with the same namespace in one Ray cluster are the same store; None: a fresh name
        per run, chosen at the first build and written back here."""

        chunk_rows: Annotated[int, Ge(1)] = 1024
        """Rows (tokens) per stored object; smaller chunks make range reads tighter but add objects."""

        shards: Annotated[int, Ge(1)] = 2
        """Index/owner actors; writes of different keys proceed in parallel across shards."""

        call_timeout_s: Annotated[float, Gt(0)] = 60.0
        """Longest wait for one shard call or payload read before ``StoreTimeoutError``."""

        image_tile_px: Annotated[int, Ge(16)] | None = 64
        """Screenshots are stored as content-addressed tiles of this side, each distinct tile once
        and compressed (``mm.image_rows``): a screen that changed in a few places costs only those
        tiles. None: every distinct image as whole raw pixels."""

        def build(self) -> RayStore:
            if not ray.is_initialized():
                raise StoreStartupError("RayStore needs a running Ray: call ray.init() (or ray.init(address=...))")
            if self.namespace is None:
                self.namespace = f"run-{uuid.uuid4().hex[:12]}"
            index = ShardedIndex(f"ray-store/{self.namespace}", self.shards, timeout_s=self.call_timeout_s)
            return RayStore(self, index)

    def __init__(self, config: RayStore.Config, index: ShardedIndex) -> None:
        super().__init__(
            chunk_rows=config.chunk_rows, image_tile_px=config.image_tile_px, settle_timeout_s=config.call_timeout_s
        )
        self._config = config
        self._shards = index

    def __reduce__(self) -> Any:
        return RayStore, (self._config, self._shards)

    def destroy(self) -> None:
        """Free every payload of this namespace by ending its shards (the objects' owners)."""
        self._shards.kill()

    def _index(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._shards.call(method, *args, **kwargs)

    def _store_fields(
        self,
        key: str,
        arrays: dict[str, np.ndarray],
        specs: dict[str, FieldSpec],
        *,
        new_key: bool,
        refs: NewKey | None,
    ) -> str | None:
        """The shard writes the bytes (it owns them): reserve, put and commit or abort happen there
        (``StoreShard.write``); what a failed write's key held or was to hold is released here,
        since it may live on other shards."""
        chunks = {name: split_chunks(array, specs[name]) for name, array in arrays.items()}
        ok, value, dropped = self._shards.write(key, specs, chunks, new_key, refs)
        if dropped:
            self._dropped([dropped], [key])
        if not ok:
            raise value
        return value

    def _read_ranges(self, reads: list[RangeRead]) -> list[np.ndarray]:
        wanted = [read.spec.chunks_overlapping(read.start, read.stop) for read in reads]
        handles = [read.handles[i] for read, ids in zip(reads, wanted) for i in ids]
        owners = [self._shards.position(read.key) for read, ids in zip(reads, wanted) for _ in ids]
        remote = [i for i, h in enumerate(handles) if isinstance(h, ray.ObjectRef)]  # others came inline
        fetched = self._shards.get([handles[i] for i in remote], [owners[i] for i in remote]) if remote else []
        for i, array in zip(remote, fetched):
            handles[i] = array
        chunks = iter(handles)
        out = []
        moved = 0
        for read, ids in zip(reads, wanted):
            parts = [next(chunks) for _ in ids]
            moved += sum(p.nbytes for p in parts)
            out.append(join_chunks(parts, read.spec, ids.start, read.start, read.stop))
        self._count(read=moved)
        return out
