"""Payload store on TransferQueue (``transferqueue`` on PyPI; Ray actors plus ZMQ underneath).

Each write of a store key is a TransferQueue key of its own in one partition
(``<key>#<id>``, chosen before the write is reserved, so that the index can name it to free if
the write dies: ``docs/store.md``); each field chunk is a column named ``<field>@<chunk>``, so
column selection (``select_fields``) gives both projection and range reads. TransferQueue returns
columns as jagged nested tensors; they are unbound per key here.

Write-once and field specs are decided by the same sharded key index the Ray backend uses,
because TransferQueue itself overwrites silently.

Start-up: TransferQueue's controller and each storage unit reserve one Ray CPU. With too few
free CPUs ``tq.init`` waits forever without a word, so the unit count is fitted to the free
CPUs before start and the start itself runs under a timeout.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import ray
import torch

from vlrl.config import Ge, Gt, NonEmpty
from vlrl.store.base import IndexedStore, RangeRead
from vlrl.store.errors import StoreStartupError
from vlrl.store.fields import FieldSpec, join_chunks, split_chunks
from vlrl.store.remote_index import ShardedIndex

_CONTROLLER = ("TransferQueueController", "transfer_queue")
os.environ.setdefault("TQ_LOGGING_LEVEL", "ERROR")  # its per-call thread-count warnings are noise here


def _column(name: str, chunk: int) -> str:
    return f"{name}@{chunk}"


class TransferQueueStore(IndexedStore):
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Payloads in TransferQueue storage units, readable from every actor of the cluster."""

        partition: Annotated[str, NonEmpty()] | None = None
        """TransferQueue partition holding this store's keys; stores with one partition are one store.
        None: a fresh partition per run, chosen at the first build and written back here."""

        chunk_rows: Annotated[int, Ge(1)] = 1024
        """Rows (tokens) per stored column chunk; smaller chunks make range reads tighter."""

        storage_units: Annotated[int, Ge(1)] | None = None
        """TransferQueue storage units (one Ray CPU each); None fits them to the free CPUs (at most 2)."""

        index_shards: Annotated[int, Ge(1)] = 2
        """Actors holding the key index (write-once checks and field specs; TransferQueue holds the data)."""

        call_timeout_s: Annotated[float, Gt(0)] = 60.0
        """Longest wait for one index-shard call before ``StoreTimeoutError``."""

        startup_timeout_s: Annotated[float, Gt(0)] = 300.0
        """Seconds to wait for TransferQueue to start before failing with an error. Free Ray CPUs
        are checked before the start, so this bounds slow actor start-ups (each imports torch): on
        two busy cores one took over 60 s."""

        image_tile_px: Annotated[int, Ge(16)] | None = 64
        """Screenshots are stored as content-addressed tiles of this side, each distinct tile once
        and compressed (``mm.image_rows``): a screen that changed in a few places costs only those
        tiles. None: every distinct image as whole raw pixels."""

        def build(self) -> TransferQueueStore:
            return TransferQueueStore.connect(self)

    def __init__(self, config: TransferQueueStore.Config, index: ShardedIndex) -> None:
        super().__init__(
            chunk_rows=config.chunk_rows, image_tile_px=config.image_tile_px, settle_timeout_s=config.call_timeout_s
        )
        self._config = config
        self._shards = index
        self._tq: Any = None

    @classmethod
    def connect(cls, config: TransferQueueStore.Config) -> TransferQueueStore:
        """Start TransferQueue in this Ray cluster if nobody has, then attach to it."""
        if not ray.is_initialized():
            raise StoreStartupError("TransferQueueStore needs a running Ray: call ray.init() first")
        _start_transferqueue(config)
        if config.partition is None:
            config.partition = f"run-{uuid.uuid4().hex[:12]}"
        index = ShardedIndex(f"tq-store/{config.partition}", config.index_shards, timeout_s=config.call_timeout_s)
        return cls(config, index)

    def __reduce__(self) -> Any:
        return TransferQueueStore, (self._config, self._shards)

    def destroy(self) -> None:
        """Free every payload of this store's partition and end its index (for all its clients).
        TransferQueue itself stays up for the other runs on the cluster and ends with Ray."""
        client = self._client()
        keys = list(client.kv_list(partition_id=self._config.partition).get(self._config.partition, {}))
        if keys:
            client.kv_clear(keys=keys, partition_id=self._config.partition)
        self._shards.kill()

    def _client(self) -> Any:
        if self._tq is None:
            import transfer_queue

            transfer_queue.init()  # attaches this process to the running controller
            self._tq = transfer_queue
        return self._tq

    def _index(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._shards.call(method, *args, **kwargs)

    def _write_handle(self, key: str) -> str:
        return f"{key}#{uuid.uuid4().hex[:16]}"

    def _write_fields(
        self, key: str, arrays: dict[str, np.ndarray], specs: dict[str, FieldSpec], handle: str
    ) -> dict[str, Any]:
        from tensordict import TensorDict

        columns = {
            _column(name, i): torch.from_numpy(np.ascontiguousarray(chunk))[None]
            for name, array in arrays.items()
            for i, chunk in enumerate(split_chunks(array, specs[name]))
        }
        self._client().kv_batch_put(keys=[handle], partition_id=self._config.partition, fields=TensorDict(columns, [1]))
        return {name: handle for name in arrays}

    def _read_ranges(self, reads: list[RangeRead]) -> list[np.ndarray]:
        wanted = [read.spec.chunks_overlapping(read.start, read.stop) for read in reads]
        # One TransferQueue call per distinct column set: a full read of rows sharing a schema
        # is a single batched get.
        columns_of: dict[str, list[str]] = defaultdict(list)  # TransferQueue key (one write's) -> columns
        for read, ids in zip(reads, wanted):
            columns_of[read.handles] += [_column(read.name, i) for i in ids]
        keys_by_columns: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for key, columns in columns_of.items():
            keys_by_columns[tuple(dict.fromkeys(columns))].append(key)
        fetched: dict[tuple[str, str], np.ndarray] = {}
        for columns, keys in keys_by_columns.items():
            batch = self._client().kv_batch_get(
                keys=keys, partition_id=self._config.partition, select_fields=list(columns)
            )
            for column in columns:
                values = batch[column]
                rows = values.unbind() if values.is_nested else list(values)
                for key, value in zip(keys, rows):
                    fetched[key, column] = value.numpy()
        out = []
        for read, ids in zip(reads, wanted):
            parts = [fetched[read.handles, _column(read.name, i)].reshape((-1, *read.spec.shape[1:])) for i in ids]
            out.append(join_chunks(parts, read.spec, ids.start, read.start, read.stop))
        self._count(read=sum(a.nbytes for a in fetched.values()))
        return out

    def _free(self, dropped: list[dict[str, tuple[FieldSpec, Any]]], keys: list[str]) -> None:
        gone = list(dict.fromkeys(handle for row in dropped for _, handle in row.values() if handle is not None))
        if gone:
            self._client().kv_clear(keys=gone, partition_id=self._config.partition)


def _start_transferqueue(config: TransferQueueStore.Config) -> None:
    import transfer_queue
    from omegaconf import OmegaConf

    try:
        ray.get_actor(*_CONTROLLER)
        running = True
    except ValueError:
        running = False
    conf = None
    if not running:
        free = int(ray.available_resources().get("CPU", 0))
        units = config.storage_units or max(1, min(2, free - 1))
        if free < units + 1:
            raise StoreStartupError(
                f"TransferQueue needs {units + 1} free Ray CPUs (1 controller + {units} storage unit(s)) "
                f"but Ray has {free} free; start Ray with more logical CPUs (ray.init(num_cpus=...)) "
                "or set storage_units lower"
            )
        conf = OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": units}}})
    errors: list[BaseException] = []

    def start() -> None:
        try:
            transfer_queue.init(conf)
        except BaseException as error:  # re-raised in the caller's thread
            errors.append(error)

    thread = threading.Thread(target=start, name="transferqueue-init", daemon=True)
    thread.start()
    thread.join(config.startup_timeout_s)
    if thread.is_alive():
        raise StoreStartupError(
            f"TransferQueue did not start within {config.startup_timeout_s:.0f} s; its controller and storage "
            "units each need a free Ray CPU (check ray.available_resources())"
        )
    if errors:
        raise StoreStartupError(f"TransferQueue failed to start: {errors[0]}") from errors[0]
