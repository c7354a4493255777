"""In-process payload store, for unit tests and single-process runs.

Arrays are copied once on write and frozen (read-only); reads return views, so a column or
range read costs nothing beyond the rows returned.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np

from vlrl.config import Ge
from vlrl.store.base import IndexedStore, RangeRead
from vlrl.store.errors import StoreError
from vlrl.store.fields import FieldSpec
from vlrl.store.index import KeyIndex


class LocalStore(IndexedStore):
    @dataclass(kw_only=True, slots=True)
    class Config:
        """An in-process store: nothing leaves the process that holds it."""

        image_tile_px: Annotated[int, Ge(16)] | None = 64
        """Screenshots are stored as content-addressed tiles of this side, each distinct tile once
        and compressed (``mm.image_rows``): a screen that changed in a few places costs only those
        tiles. None: every distinct image as whole raw pixels."""

        def build(self) -> LocalStore:
            return LocalStore(image_tile_px=self.image_tile_px)

    def __init__(self, *, image_tile_px: int | None = 64) -> None:
        super().__init__(chunk_rows=1 << 62, image_tile_px=image_tile_px)
        self._lock = threading.Lock()
        self._keys = KeyIndex()

    def __reduce__(self) -> Any:
        raise StoreError(
            "LocalStore lives in one process and cannot be sent to another; use RayStore or TransferQueueStore"
        )

    def _index(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return getattr(self._keys, method)(*args, **kwargs)

    def _write_fields(
        self, key: str, arrays: dict[str, np.ndarray], specs: dict[str, FieldSpec], handle: Any
    ) -> dict[str, Any]:
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
