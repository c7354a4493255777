"""The ``PayloadStore`` contract and the shared front end every backend builds on.

A payload is a set of named fields (arrays) under a key. The contract:

- ``put(key, fields)`` writes a new key once; ``add_fields(key, fields)`` adds fields written
  later (advantages, teacher scores). Writing an existing key or field again is an error.
- ``get(keys, fields=...)`` reads only the named fields (column projection);
  ``get_range(key, field, start, stop)`` reads rows ``[start, stop)`` of one field.
- ``schema(key)`` returns field specs (shape, dtype) without touching payload bytes.
- ``put_shared(key, fields, holder=...)`` writes a key many writers may hold (content-addressed
  images, held by the sequences that name them): the first call writes it, each later one takes
  one more reference for its holder instead; ``release([(key, holder), ...])`` drops one of that
  holder's references per pair and deletes a key with its last. A holder can only drop what it
  holds, and ``holds(refs)`` says whether references are still held. References count the same
  whatever the key's state (being written, written, failed: ``docs/store.md``). ``put`` makes a
  key held by itself, so ``release([(key, key)])`` ends it as ``delete`` would.
- ``put_shared`` returns only once its key is written: a key another writer is writing is waited
  for, and written again if that write fails (``share(..., settle=True)`` alike). Each write
  carries a token of its own: a write whose key went meanwhile lands nowhere (its bytes are freed
  and it raises ``KeyMissingError``), a failed write drops its writer's reference and what its
  key was to hold, and leaves the key, failed, to those who took a reference meanwhile.
- ``put`` and ``put_shared`` may name their ``writer``; ``take_back(writers)`` deletes what those
  writers put and drops the references they took, for a writer that died before undoing them.
- A key may hold others (an image its tile packs): ``put_shared(key, ..., holds=children,
  holds_as=name)`` after taking each child's reference with ``share``/``put_shared(...,
  holder=name, held_for=key)``. Those references are the key's: released when it goes, kept
  by ``take_back`` once it was written, dropped by the store when the key's index shard restarts
  (so ``release_held`` drops them where a writer may find them dropped already).
- ``delete(keys)`` frees keys whatever their references; ``stats()`` counts keys (every record,
  written or not: what a leak check must see at zero) and bytes store-wide; ``io_stats()``
  counts the payload bytes this client moved, which is what the benchmarks report.

Backends differ only in where the bytes live and how a field is read (``_write_fields`` and
``_read_ranges``); bookkeeping and validation are shared here so all behave the same.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vlrl.store.errors import PayloadTypeError, StoreError, StoreTimeoutError
from vlrl.store.fields import FieldSpec, as_payload_array, check_range, spec_for
from vlrl.store.index import ABSENT, HELD, PENDING, WRITTEN, NewKey, StoreStats, went_while_written

SHARED_WRITE_ATTEMPTS = 16
"""``put_shared`` writes a key again after another writer's write of it failed at most this often."""


@dataclass(frozen=True, slots=True)
class IOStats:
    """Payload bytes this client moved (reads count what crossed to it, not what it asked for)."""

    bytes_read: int = 0
    bytes_written: int = 0
    reads: int = 0
    writes: int = 0


@runtime_checkable
class PayloadStore(Protocol):
    def put(self, key: str, fields: Mapping[str, Any], *, writer: str | None = None) -> None: ...
    def add_fields(self, key: str, fields: Mapping[str, Any]) -> None: ...
    def get(self, keys: Sequence[str], fields: Sequence[str] | None = None) -> dict[str, dict[str, np.ndarray]]: ...
    def get_range(self, key: str, field: str, start: int, stop: int) -> np.ndarray: ...
    def schema(self, key: str) -> dict[str, FieldSpec]: ...
    def contains(self, keys: Sequence[str]) -> list[bool]: ...
    def delete(self, keys: Sequence[str], *, missing_ok: bool = False) -> None: ...
    def put_shared(
        self,
        key: str,
        fields: Mapping[str, Any],
        *,
        holder: str,
        writer: str | None = None,
        held_for: str | None = None,
        holds: Sequence[str] = (),
        holds_as: str | None = None,
    ) -> bool: ...
    def share(
        self,
        keys: Sequence[str],
        holder: str,
        *,
        writer: str | None = None,
        held_for: str | None = None,
        settle: bool = False,
    ) -> list[bool]: ...
    def release(self, refs: Sequence[tuple[str, str]]) -> list[str]: ...
    def release_held(self, refs: Sequence[tuple[str, str]]) -> list[str]: ...
    def holds(self, refs: Sequence[tuple[str, str]]) -> list[bool]: ...
    def take_back(self, writers: Sequence[str]) -> list[str]: ...
    def stats(self) -> StoreStats: ...
    def io_stats(self) -> IOStats: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RangeRead:
    """One backend read: rows ``[start, stop)`` of a stored field."""

    key: str
    name: str
    spec: FieldSpec
    handles: Any
    start: int
    stop: int


class IndexedStore(ABC):
    """Validation, write-once bookkeeping and I/O accounting over a key index."""

    def __init__(self, chunk_rows: int, image_tile_px: int | None = None, *, settle_timeout_s: float = 60.0) -> None:
        self._chunk_rows = chunk_rows
        self._settle_timeout_s = settle_timeout_s
        """Longest wait for another writer's write of a shared key to commit or fail."""
        self.image_tile_px = image_tile_px
        """How the store's writers lay out screenshots (``mm.image_rows``); None: raw pixels."""
        self._io_lock = threading.Lock()
        self._io = IOStats()

    # -- backend hooks ---------------------------------------------------------------------

    @abstractmethod
    def _index(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``KeyIndex.<method>`` wherever this backend keeps its index."""

    def _write_handle(self, key: str) -> Any:
        """Where one write of ``key`` puts its bytes, chosen before it is reserved (so that the index
        can name them to free if the writer dies mid-write); None where the backend needs none."""
        return None

    def _write_fields(
        self, key: str, arrays: dict[str, np.ndarray], specs: dict[str, FieldSpec], handle: Any
    ) -> dict[str, Any]:
        """Store the arrays of one key (at ``handle``, from ``_write_handle``); return a handle per
        field for the index.

        Backends implement this, or override ``_store_fields`` when their index writes the data.
        """
        raise NotImplementedError(f"{type(self).__name__} implements neither _write_fields nor _store_fields")

    @abstractmethod
    def _read_ranges(self, reads: list[RangeRead]) -> list[np.ndarray]:
        """Return the requested rows of each read, moving as few bytes as the backend can."""

    def _free(self, dropped: list[dict[str, tuple[FieldSpec, Any]]], keys: list[str]) -> None:
        """Release the storage of rows the index let go (``{field: (spec, handles)}``): deleted keys,
        and writes that landed nowhere (a late commit, an abort, a dead writer's write)."""

    # -- public API --------------------------------------------------------------------------

    def put(self, key: str, fields: Mapping[str, Any], *, writer: str | None = None) -> None:
        self._write(key, fields, new_key=True, refs=NewKey(writer=writer))

    def add_fields(self, key: str, fields: Mapping[str, Any]) -> None:
        self._write(key, fields, new_key=False)

    def get(self, keys: Sequence[str], fields: Sequence[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        keys = _check_keys(keys)
        names = None if fields is None else _check_field_names(fields)
        entries = self._index("lookup", keys, names)
        reads = [
            RangeRead(key, name, spec, handles, 0, spec.rows)
            for key, row in zip(keys, entries)
            for name, (spec, handles) in row.items()
        ]
        arrays = iter(self._read_ranges(reads))
        return {key: {name: next(arrays) for name in row} for key, row in zip(keys, entries)}

    def get_range(self, key: str, field: str, start: int, stop: int) -> np.ndarray:
        (key,) = _check_keys([key])
        ((spec, handles),) = self._index("lookup", [key], [field])[0].values()
        check_range(key, field, spec, start, stop)
        return self._read_ranges([RangeRead(key, field, spec, handles, int(start), int(stop))])[0]

    def schema(self, key: str) -> dict[str, FieldSpec]:
        return self._index("schema", _check_keys([key])[0])

    def contains(self, keys: Sequence[str]) -> list[bool]:
        return self._index("contains", _check_keys(keys))

    def delete(self, keys: Sequence[str], *, missing_ok: bool = False) -> None:
        keys = _check_keys(keys)
        dropped = self._index("delete", keys, missing_ok=missing_ok)
        self._dropped(dropped, keys)

    def put_shared(
        self,
        key: str,
        fields: Mapping[str, Any],
        *,
        holder: str,
        writer: str | None = None,
        held_for: str | None = None,
        holds: Sequence[str] = (),
        holds_as: str | None = None,
    ) -> bool:
        """Write ``key`` if absent, else take one more reference to it, for ``holder``; True when
        this call wrote it. Every call is matched by one ``release`` of ``(key, holder)``. Only
        absent keys send their bytes; one another writer puts meanwhile is shared all the same
        (decided where it is claimed, ``KeyIndex.reserve``). ``held_for``: the reference is that
        key's own (it holds this one through ``holds``). ``holds``: keys the new key holds one
        reference to each, already taken for it under the holder name ``holds_as``; released when
        ``key`` goes or its write fails (not taken over when ``key`` was there already: the caller
        then drops them). Returns only once ``key`` is written: a write of it in flight is waited
        for, and if that write fails this call writes the key (``docs/store.md``)."""
        (key, holder) = _check_keys([key, holder])
        holds = tuple(_check_keys(list(holds)))
        if holds and not (isinstance(holds_as, str) and holds_as):
            raise StoreError(
                f"store key {key!r}: holds needs holds_as, the holder name its references were taken under"
            )
        refs = NewKey(holder, writer, held_for, holds, holds_as)
        for _ in range(SHARED_WRITE_ATTEMPTS):
            state = self._index("take", [key], holder, writer, held_for)[0]
            if state == ABSENT:
                state = self._write(key, fields, new_key=True, refs=refs)
                if state is None:  # written by this call
                    return True
            if state == WRITTEN or self._settled([(key, holder)])[0]:
                return False
            # The write this shared failed: drop the reference to the failed key and write it.
            self.release_held([(key, holder)])
        raise StoreError(f"store key {key!r}: {SHARED_WRITE_ATTEMPTS} writes of it failed in turn")

    def share(
        self,
        keys: Sequence[str],
        holder: str,
        *,
        writer: str | None = None,
        held_for: str | None = None,
        settle: bool = False,
    ) -> list[bool]:
        """One more reference for ``holder`` to each key that is written or being written (True),
        none to one that is absent or whose write failed (False); every True is matched by one
        ``release`` of ``(key, holder)``. ``held_for``: as in ``put_shared``. ``settle``: True only
        for a key written: one being written is waited for, and if its write fails the reference
        is dropped again (False: the caller writes it)."""
        keys, holder = _check_keys(keys), _check_keys([holder])[0]
        states = self._index("take", keys, holder, writer, held_for)
        if settle and PENDING in states:
            pending = [i for i, state in enumerate(states) if state == PENDING]
            for i, written in zip(pending, self._settled([(keys[i], holder) for i in pending])):
                if not written:
                    self.release_held([(keys[i], holder)])
                    states[i] = ABSENT
        return [state != ABSENT for state in states]

    def release(self, refs: Sequence[tuple[str, str]]) -> list[str]:
        """Drop one reference per ``(key, holder)``; return the keys this deleted (their last went)."""
        refs = _check_refs(refs)
        dropped = self._index("release", refs)
        freed = [key for (key, _), row in zip(refs, dropped) if row is not None]
        self._dropped([row for row in dropped if row is not None], freed)
        return freed

    def release_held(self, refs: Sequence[tuple[str, str]]) -> list[str]:
        """``release`` of those references still held, skipping the rest: for a writer dropping
        references it took for a key (``held_for``), which the store drops itself when that key's
        shard restarts."""
        refs = _check_refs(refs)
        dropped = self._index("release_held", refs)
        freed = [key for (key, _), row in zip(refs, dropped) if row is not None]
        self._dropped([row for row in dropped if row is not None], freed)
        return freed

    def holds(self, refs: Sequence[tuple[str, str]]) -> list[bool]:
        """Whether each ``(key, holder)`` reference is held: what a holder checks before relying on
        a shared key it took earlier (a restarted shard lost the references it held)."""
        return self._index("holds", _check_refs(refs))

    def take_back(self, writers: Sequence[str]) -> list[str]:
        """Delete every key the ``writers`` put and drop every reference they took, whichever shard
        holds them: the undo of a writer that died before it could undo its own writes (a loop
        host killed under its tenants). A reference it took for a key (``held_for``) goes only if
        that key does not hold it: the key was never written, or went; a key the writer wrote and
        others still hold keeps what it names. Returns the keys this deleted."""
        writers = _check_keys(writers)
        found = self._index("take_back", writers)
        self._dropped([row for _, row, _ in found], [key for key, _, _ in found])
        deleted = [key for key, _, gone in found if gone]
        pending = self._index("held_for_refs", writers)
        if pending:
            names = self._index("holds_as", [owner for _, _, owner in pending])
            unowned = [(key, holder) for (key, holder, _), name in zip(pending, names) if name != holder]
            deleted += self.release_held(unowned)
        return deleted

    def stats(self) -> StoreStats:
        return self._index("stats")

    def io_stats(self) -> IOStats:
        with self._io_lock:
            return self._io

    def close(self) -> None:
        """Drop this client's connections; stored payloads stay for other clients."""

    # -- shared machinery --------------------------------------------------------------------

    def _dropped(self, rows: list[dict[str, Any]], keys: list[str]) -> None:
        """Free the storage of keys the index deleted, then drop the references they held (which
        may delete further keys: an image's tile packs)."""
        while keys:
            held = [ref for row in rows for ref in row.pop(HELD, (None, ()))[1]]
            self._free(rows, keys)
            if not held:
                return
            released = self._index("release_held", held)
            keys = [key for (key, _), row in zip(held, released) if row is not None]
            rows = [row for row in released if row is not None]

    def _settled(self, refs: list[tuple[str, str]]) -> list[bool]:
        """``_settle`` of the keys of references just taken; if it raises, those references are
        dropped first (the caller's call fails, so nobody would drop them)."""
        try:
            return self._settle([key for key, _ in refs])
        except BaseException:
            self.release_held(refs)
            raise

    def _settle(self, keys: list[str]) -> list[bool]:
        """Wait until none of ``keys`` is being written; whether each is written. The index is polled
        (nothing waits inside it, where a dead writer would block the shard), from 1 ms apart to
        50 ms, for at most ``settle_timeout_s``: only a writer that died unnamed never ends."""
        deadline = time.monotonic() + self._settle_timeout_s
        pause = 0.001
        while True:
            states = self._index("states", keys)
            if PENDING not in states:
                return [state == WRITTEN for state in states]
            if time.monotonic() > deadline:
                waiting = [key for key, state in zip(keys, states) if state == PENDING]
                raise StoreTimeoutError(
                    f"store key(s) {waiting[:3]} still being written after {self._settle_timeout_s:g} s: their "
                    "writer neither committed nor failed (a writer that died without a writer name?)"
                )
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    def _write(
        self, key: str, fields: Mapping[str, Any], *, new_key: bool, refs: NewKey | None = None
    ) -> str | None:
        """Write ``fields``: None when this call wrote them; else the state (``PENDING`` or
        ``WRITTEN``) of the shared key another writer had claimed, which got a reference instead
        (``KeyIndex.reserve``)."""
        (key,) = _check_keys([key])
        if not isinstance(fields, Mapping) or not fields:
            raise PayloadTypeError(f"store key {key!r}: fields must be a non-empty mapping of name -> array")
        arrays = {name: as_payload_array(key, name, value) for name, value in fields.items()}
        specs = {name: spec_for(array, self._chunk_rows) for name, array in arrays.items()}
        shared = self._store_fields(key, arrays, specs, new_key=new_key, refs=refs)
        if shared is not None:
            return shared
        self._count(written=sum(a.nbytes for a in arrays.values()))
        return None

    def _store_fields(
        self,
        key: str,
        arrays: dict[str, np.ndarray],
        specs: dict[str, FieldSpec],
        *,
        new_key: bool,
        refs: NewKey | None,
    ) -> str | None:
        """Reserve the names, write the data, commit under the reservation's token: None. A failed
        write aborts (its bytes and its key's holds freed); a write whose key went meanwhile frees
        its bytes and raises. A shared key that existed got a reference instead: its state."""
        handle = self._write_handle(key)
        token, state = self._index("reserve", key, specs, new_key=new_key, refs=refs, handle=handle)
        if token is None:
            return state
        try:
            handles = self._write_fields(key, arrays, specs, handle)
        except BaseException:
            row = self._index("abort", key, token)
            if handle is not None:  # whatever of its bytes landed
                row = {**row, **{name: (spec, handle) for name, spec in specs.items()}}
            self._dropped([row], [key])
            raise
        if not self._index("commit", key, handles, token):
            self._dropped([{name: (specs[name], h) for name, h in handles.items()}], [key])
            raise went_while_written(key)
        return None

    def _count(self, *, read: int = 0, written: int = 0) -> None:
        with self._io_lock:
            io = self._io
            self._io = IOStats(
                bytes_read=io.bytes_read + read,
                bytes_written=io.bytes_written + written,
                reads=io.reads + (read > 0),
                writes=io.writes + (written > 0),
            )


def _check_keys(keys: Sequence[str]) -> list[str]:
    if isinstance(keys, str) or not isinstance(keys, Sequence):
        raise StoreError(f"store keys must be a list of strings, got {type(keys).__name__}")
    bad = [k for k in keys if not isinstance(k, str) or not k]
    if bad:
        raise StoreError(f"store keys must be non-empty strings, got {bad[:3]!r}")
    return list(keys)


def _check_refs(refs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    if isinstance(refs, str) or not isinstance(refs, Sequence):
        raise StoreError(f"store references must be a list of (key, holder) pairs, got {type(refs).__name__}")
    bad = [r for r in refs if not (isinstance(r, tuple | list) and len(r) == 2)]
    if bad:
        raise StoreError(f"store references must be (key, holder) pairs, got {bad[:3]!r}")
    keys = _check_keys([part for ref in refs for part in ref])
    return list(zip(keys[::2], keys[1::2]))


def _check_field_names(fields: Sequence[str]) -> list[str]:
    if isinstance(fields, str) or not isinstance(fields, Sequence) or not fields:
        raise StoreError(f"fields must be a non-empty list of field names, got {fields!r}")
    return list(fields)
