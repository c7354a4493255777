"""In-process payload store, for unit tests and single-process runs.

Arrays are copied once on write and frozen (read-only); reads return views, so a column or
range read costs nothing beyond the rows returned.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlrl.store.base import IndexedStore, RangeRead
from vlrl.store.errors import StoreError
from vlrl.store.fields import FieldSpec
from vlrl.store.index import KeyIndex


class LocalStore(IndexedStore):
    @dataclass(kw_only=True, slots=True)
    class Config:
        """An in-process store: nothing leaves the process that holds it."""

        def build(self) -> LocalStore:
            return LocalStore()

    def __init__(self) -> None:
        super().__init__(chunk_rows=1 << 62)
        self._lock = threading.Lock()
        self._keys = KeyIndex()

    def __reduce__(self) -> Any:
        raise StoreError(
            "LocalStore lives in one process and cannot be sent to another; use RayStore or TransferQueueStore"
        )

    def _index(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return getattr(self._keys, method)(*args, **kwargs)

    def _write_fields(self, key: str, arrays: dict[str, np.ndarray], specs: dict[str, FieldSpec]) -> dict[str, Any]:
        frozen = {}
        for name, array in arrays.items():
            copy = np.array(array, copy=True)
            copy.flags.writeable = False
            frozen[name] = copy
        return frozen

    def _read_ranges(self, reads: list[RangeRead]) -> list[np.ndarray]:
        out = [read.handles[read.start : read.stop] for read in reads]
        self._count(read=sum(a.nbytes for a in out))
        return out
