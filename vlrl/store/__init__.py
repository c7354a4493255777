"""Data plane: the payload store. Heavy per-sequence fields are written once and read by field
and by row range wherever they are consumed; the driver only ever handles keys.

Backends: ``LocalStore`` (in-process), ``RayStore`` (Ray object store) and
``TransferQueueStore`` (``vlrl.store.transferqueue_store``; needs the ``transferqueue`` extra).
"""

from vlrl.store.base import IndexedStore, IOStats, PayloadStore
from vlrl.store.errors import (
    DuplicateWriteError,
    FieldMissingError,
    KeyMissingError,
    PayloadTypeError,
    RangeError,
    ShardLostError,
    StoreError,
    StoreStartupError,
    StoreTimeoutError,
    WritesTakenBackError,
)
from vlrl.store.fields import SUPPORTED_DTYPES, FieldSpec
from vlrl.store.index import StoreStats
from vlrl.store.ledger import WriteLedger
from vlrl.store.local import LocalStore

__all__ = [
    "SUPPORTED_DTYPES",
    "DuplicateWriteError",
    "FieldMissingError",
    "FieldSpec",
    "IOStats",
    "IndexedStore",
    "KeyMissingError",
    "LocalStore",
    "PayloadStore",
    "PayloadTypeError",
    "RangeError",
    "ShardLostError",
    "StoreError",
    "StoreStartupError",
    "StoreStats",
    "StoreTimeoutError",
    "WriteLedger",
    "WritesTakenBackError",
]
