"""The key index: which fields each key has, their specs, and backend handles to their chunks.

One index serves a whole store. The local backend holds it in-process; the distributed
backends shard it over a few Ray actors, each key's records in one of them, so that every
process sees the same keys and the write-once rule is decided in one place. It holds small
records only: specs, holders and handles such as ObjectRefs, and for ``RayStore`` the chunks of
at most ``remote_index.INLINE_BYTES`` it keeps inline, never larger payload arrays.
"""

from __future__ import annotations

import itertools
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from vlrl.store.errors import DuplicateWriteError, FieldMissingError, KeyMissingError, ShardLostError
from vlrl.store.fields import FieldSpec


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Store-wide totals. ``keys`` counts every record a leak check must see at zero: keys in any
    state (being written, written, failed; ``docs/store.md``) and writes whose key went while they
    were in flight, not freed yet. ``written``: the committed keys alone. ``bytes``: committed
    payload bytes. ``bytes_put``: payload bytes committed since the store started, deleted or not
    (what writers paid: the difference of two readings is what was written between them)."""

    keys: int
    bytes: int
    written: int = 0
    bytes_put: int = 0


@dataclass(frozen=True, slots=True)
class NewKey:
    """How a key being written is held: its first reference is ``holder``'s (None: the key's own,
    a plain ``put``), taken by ``writer``; ``held_for``: that reference is key ``held_for``'s own
    (see ``KeyIndex``). ``holds`` are keys this one holds a reference to each, taken before it
    was written under the holder name ``holds_as`` (unique to this write) with ``held_for`` this
    key, and dropped when it goes."""

    holder: str | None = None
    writer: str | None = None
    held_for: str | None = None
    holds: tuple[str, ...] = ()
    holds_as: str | None = None


def shard_of(key: str, shards: int) -> int:
    """Which of ``shards`` index shards holds ``key``'s record."""
    return zlib.crc32(key.encode()) % shards


HELD = "__holds__"
"""Where a deleted key's row names the references it held, ``(key, holder)``, for the store to
release them in turn."""

ABSENT, PENDING, WRITTEN = "absent", "pending", "written"
"""What ``KeyIndex.take`` and ``states`` say of a key: no record, or one with nothing to share (its
write failed); claimed by a write in flight; committed (``docs/store.md``)."""


def went_while_written(key: str) -> KeyMissingError:
    """What a writer is told when its key went while it wrote it (``KeyIndex.commit`` said False)."""
    return KeyMissingError(
        f"store key {key!r} went while it was written (its last holder released it, it was deleted, or its "
        "writer was taken back): the bytes written were freed"
    )


@dataclass(slots=True)
class _Entry:
    spec: FieldSpec
    write: str
    """The token of the write that claimed it (``KeyIndex.reserve``)."""
    handles: Any = None
    committed: bool = False


@dataclass(slots=True)
class _Write:
    """A write in flight: its key, the fields it claimed, the reference its reservation gave (None:
    ``add_fields``), the writer that named itself, and where its bytes go (a backend handle chosen
    before ``reserve``; None where the backend needs none). ``orphaned``: its key went meanwhile."""

    key: str
    specs: dict[str, FieldSpec]
    holder: str | None
    writer: str | None
    handle: Any
    orphaned: bool = False

    def row(self) -> dict[str, tuple[FieldSpec, Any]]:
        """What the store frees of this write's bytes (nothing without a handle)."""
        return {} if self.handle is None else {name: (spec, self.handle) for name, spec in self.specs.items()}


class KeyIndex:
    """Write-once bookkeeping. A write is ``reserve`` (claims the names, gives a token) then
    ``commit`` or ``abort`` of that token. The states of a key and who moves them are written down
    in ``docs/store.md``; in short:

    Every key records who holds it: a ``put`` key is held by itself, a shared key by each
    ``share``'s holder (a sequence naming an image, once per time it names it), and each
    ``release`` of ``(key, holder)`` drops one of that holder's references; the last reference
    drops the record. References count the same whatever the key's state (being written, written,
    failed), and nothing waits for a commit: a key whose last reference goes while it is written
    goes at once, and its write is kept by token as *orphaned*, so that its late ``commit`` lands
    nowhere (the writer frees its bytes) and a later write of the key never mixes with it.

    A new key whose write fails (``abort``, or its writer taken back) loses its writer's reference
    and what it was to hold, and stays *failed* for those who took a reference meanwhile: a read
    says so, ``share`` finds nothing to share, and the next ``put_shared`` claims it anew.

    A write may name its ``writer`` (a tenant's run): ``take_back(writers)`` then deletes the keys
    each writer put, drops the references it took and fails its writes in flight, returning their
    bytes' handles to free, for a writer whose process died before it could undo them itself.

    A reference may be *held for* a key (an image's reference to a tile pack it names): it is that
    key's, released when the key goes, under a holder name unique to the key's write (its
    ``holds_as``), so a key written again after it went never shares references with its earlier
    self. Such a reference is not taken back with its writer once the key it is held for was
    written (the key owns it then: ``held_for_refs`` lists them for the store to decide), and when
    the shard indexing that key restarts, the key is gone and ``drop_held_for`` drops them.

    ``successor``: this index replaced one that died (a restarted shard), so a key or reference
    it does not know may have been lost with its predecessor: reads of it raise ``ShardLostError``
    and releasing it is a no-op, while everything written since is kept exactly as above.
    """

    def __init__(self, *, successor: bool = False) -> None:
        self._rows: dict[str, dict[str, _Entry]] = {}
        self._claim: dict[str, str] = {}  # key -> token of the new-key write in flight that claimed it
        self._writes: dict[str, _Write] = {}  # token -> write in flight (orphaned ones included)
        self._holders: dict[str, Counter[str]] = {}
        self._writer_of: dict[str, str] = {}  # put key -> its writer
        self._ref_writers: dict[tuple[str, str], Counter[str]] = {}  # (key, holder) -> writers of its references
        self._holds: dict[str, tuple[str, ...]] = {}  # key -> the keys it holds
        self._holds_as: dict[str, str] = {}  # key -> the holder name of its references to what it holds
        self._held_for: dict[tuple[str, str], str] = {}  # (key, holder) -> the key whose own reference it is
        self._epoch, self._serial = uuid.uuid4().hex[:12], itertools.count()  # tokens unique past a restart
        self._orphans = 0
        self._bytes = 0
        self._bytes_put = 0
        self.successor = successor

    def _state(self, key: str) -> str:
        row = self._rows.get(key)
        if row is None:
            return ABSENT
        if any(e.committed for e in row.values()):
            return WRITTEN
        return PENDING if key in self._claim else ABSENT  # failed: nothing to share

    def states(self, keys: list[str]) -> list[str]:
        """``ABSENT`` (no record, or its write failed), ``PENDING`` or ``WRITTEN``, per key."""
        return [self._state(key) for key in keys]

    def reserve(
        self,
        key: str,
        specs: dict[str, FieldSpec],
        *,
        new_key: bool,
        refs: NewKey | None = None,
        handle: Any = None,
    ) -> tuple[str | None, str]:
        """Claim ``specs`` under ``key``: ``(token, PENDING)``, the token for the write's ``commit``
        or ``abort``. ``new_key`` distinguishes ``put`` from ``add_fields``, ``refs`` says how a new
        key is held (by itself, when None), ``handle`` where the write's bytes go (returned to free
        them if the write dies). A shared key (``refs`` names a holder) that is being written or
        written gets that holder's reference instead, as ``share`` gives it: ``(None, state)``,
        nothing claimed. Deciding here, in the call that claims, leaves no gap between finding a
        key absent and writing it for other writers to put (and drop) it in. A failed key is
        claimed anew, its holders kept."""
        state = self._state(key)
        if new_key and state != ABSENT and refs is not None and refs.holder is not None:
            self.take([key], refs.holder, refs.writer, refs.held_for)
            return None, state
        if new_key and state != ABSENT:
            raise DuplicateWriteError(
                f"store key {key!r} was already written (fields {sorted(self._rows[key])}); payloads are written "
                "once, use add_fields for fields written later"
            )
        row = self._rows.get(key)
        if not new_key:
            if state != WRITTEN:
                raise self._missing(f"store key {key!r} does not exist; add_fields needs a key written by put")
            taken = sorted(set(specs) & set(row))
            if taken:
                raise DuplicateWriteError(f"store key {key!r} already has field(s) {taken}; fields are written once")
        token = f"{self._epoch}/{next(self._serial)}"
        row = self._rows.setdefault(key, {})
        for name, spec in specs.items():
            row[name] = _Entry(spec, token)
        if not new_key:
            self._writes[token] = _Write(key, dict(specs), None, None, handle)
            return token, PENDING
        refs = refs or NewKey()
        holder = key if refs.holder is None else refs.holder
        self._writes[token] = _Write(key, dict(specs), holder, refs.writer, handle)
        self._claim[key] = token
        self._holders.setdefault(key, Counter())[holder] += 1  # a failed key keeps its holders
        if refs.writer is not None and refs.holder is None:
            self._writer_of[key] = refs.writer
        elif refs.writer is not None:
            self._ref_writers.setdefault((key, holder), Counter())[refs.writer] += 1
        if refs.held_for is not None:
            self._held_for[(key, holder)] = refs.held_for
        if refs.holds:
            self._holds[key] = tuple(refs.holds)
            self._holds_as[key] = refs.holds_as
        return token, PENDING

    def commit(self, key: str, handles: dict[str, Any], token: str) -> bool:
        """End the write ``token``: its fields are readable. False: it is not in flight (its key
        went meanwhile, or its writer was taken back); nothing lands, and the writer frees its
        bytes (``went_while_written``)."""
        write = self._writes.pop(token, None)
        if write is None or write.orphaned:
            self._orphans -= write is not None
            return False
        row = self._rows[key]
        for name, handle in handles.items():
            entry = row[name]
            entry.handles, entry.committed = handle, True
            self._bytes += entry.spec.nbytes
            self._bytes_put += entry.spec.nbytes
        if self._claim.get(key) == token:
            del self._claim[key]
        return True

    def abort(self, key: str, token: str) -> dict[str, tuple[FieldSpec, Any]]:
        """End the write ``token``, whose bytes failed: its writer's reference goes (the writer got
        the error instead), and the key with it if that was the last, else it stays failed for the
        other holders. Returns what the store must still release (``HELD``: what the key held or
        was to hold); the writer frees its own bytes."""
        write = self._writes.get(token)
        if write is None or write.orphaned:
            self._forget_write(token)
            return {}
        if write.holder is not None:
            dropped = self._release([(key, write.holder)])[0]
            if dropped is not None:  # the key went with it; the write was orphaned there
                self._forget_write(token)
                return {name: value for name, value in dropped.items() if name == HELD}
        return self._fail(token)

    def _forget_write(self, token: str) -> None:
        write = self._writes.pop(token, None)
        if write is not None and write.orphaned:
            self._orphans -= 1

    def _fail(self, token: str) -> dict[str, tuple[FieldSpec, Any]]:
        """Forget the fields the live write ``token`` claimed. A new key then stays failed for its
        holders, or goes without them; what it was to hold is returned under ``HELD``."""
        write = self._writes.pop(token)
        row = self._rows[write.key]
        for name in [name for name, entry in row.items() if entry.write == token]:
            del row[name]
        if write.holder is None:  # add_fields: the key stays written
            return {}
        self._claim.pop(write.key, None)
        if not self._holders.get(write.key):
            return self._drop(write.key)
        self._writer_of.pop(write.key, None)
        held, holds_as = self._holds.pop(write.key, ()), self._holds_as.pop(write.key, None)
        return {HELD: (None, tuple((child, holds_as) for child in held))} if held else {}

    def lookup(self, keys: list[str], fields: list[str] | None) -> list[dict[str, tuple[FieldSpec, Any]]]:
        """Specs and handles of the named fields (all committed fields when ``fields`` is None)."""
        out = []
        for key in keys:
            row = self._committed_row(key)
            names = list(row) if fields is None else fields
            missing = [n for n in names if n not in row]
            if missing:
                raise FieldMissingError(f"store key {key!r} has no field(s) {missing}; it has {sorted(row)}")
            out.append({n: (row[n].spec, row[n].handles) for n in names})
        return out

    def schema(self, key: str) -> dict[str, FieldSpec]:
        return {name: entry.spec for name, entry in self._committed_row(key).items()}

    def contains(self, keys: list[str]) -> list[bool]:
        return [any(e.committed for e in self._rows.get(k, {}).values()) for k in keys]

    def delete(self, keys: list[str], *, missing_ok: bool = False) -> list[dict[str, tuple[FieldSpec, Any]]]:
        """Forget ``keys`` whatever their holders; returns what was stored so the backend can free it."""
        if not missing_ok:
            self.check_deletable(keys)
        return [self._drop(key) for key in keys]

    def check_deletable(self, keys: list[str]) -> None:
        """Raise unless every key is written: ``KeyMissingError``, or ``ShardLostError`` on a successor."""
        absent = [k for k, present in zip(keys, self.contains(keys)) if not present]
        if absent:
            raise self._missing(f"cannot delete store key(s) {absent[:5]}: not written or already deleted")

    def share(
        self, keys: list[str], holder: str, writer: str | None = None, held_for: str | None = None
    ) -> list[bool]:
        """``take``, True where a reference was taken (the key is written or being written)."""
        return [state != ABSENT for state in self.take(keys, holder, writer, held_for)]

    def take(
        self, keys: list[str], holder: str, writer: str | None = None, held_for: str | None = None
    ) -> list[str]:
        """One more reference by ``holder`` (taken by ``writer``, held for key ``held_for``) to each
        key written (``WRITTEN``) or being written (``PENDING``); none to a key with nothing to
        share (``ABSENT``: no record, or its write failed), which the caller then writes."""
        out = []
        for key in keys:
            state = self._state(key)
            if state != ABSENT:
                self._holders[key][holder] += 1
                if writer is not None:
                    self._ref_writers.setdefault((key, holder), Counter())[writer] += 1
                if held_for is not None:
                    self._held_for[(key, holder)] = held_for
            out.append(state)
        return out

    def take_back(self, writers: list[str]) -> list[tuple[str, dict[str, tuple[FieldSpec, Any]], bool]]:
        """Undo what ``writers`` did before they died: drop the references they took (whatever
        their key's state; what is gone already is skipped), but those held for a key
        (``held_for_refs``); delete the keys they put (in any state); fail their writes in flight
        (their commits never come, or land nowhere). Returns ``(key, row, deleted)`` for the
        backend to free each row: a deleted key's stored fields, or a dead write's bytes (by the
        handle it named at ``reserve``) and what its key was to hold (``deleted`` False when the
        key stays, failed, for its other holders)."""
        refs = [ref for ref in self._taken_by(writers) if ref not in self._held_for]
        out = [(key, row, True) for (key, _), row in zip(refs, self._release(refs)) if row is not None]
        wanted = set(writers)
        keys = [key for key, writer in self._writer_of.items() if writer in wanted]
        out += [(key, self._drop(key), True) for key in keys]
        for token in [token for token, write in self._writes.items() if write.writer in wanted]:
            write = self._writes[token]
            if write.orphaned:
                self._forget_write(token)
                out.append((write.key, write.row(), False))
            else:
                failed = self._fail(token)
                out.append((write.key, {**write.row(), **failed}, write.key not in self._rows))
        return out

    def held_for_refs(self, writers: list[str]) -> list[tuple[str, str, str]]:
        """``(key, holder, held_for)`` of the references ``writers`` took for a key: each is to be
        dropped only if that key does not hold through ``holder`` (``holds_as``), i.e. was never
        written by that writer, or went."""
        return [(*ref, self._held_for[ref]) for ref in self._taken_by(writers) if ref in self._held_for]

    def holds_as(self, keys: list[str]) -> list[str | None]:
        """The holder name each key holds the keys it holds under (None: it holds none, or is absent)."""
        return [self._holds_as.get(key) if self.contains([key])[0] else None for key in keys]

    def drop_held_for(self, position: int, shards: int) -> list[tuple[str, dict[str, tuple[FieldSpec, Any]]]]:
        """Drop every reference held for a key that shard ``position`` of ``shards`` indexed: that
        shard restarted, so those keys are gone and will never release them. Returns each key
        this deleted with its stored fields (tile packs: they hold nothing themselves)."""
        refs = [
            ref
            for ref, owner in self._held_for.items()
            if shard_of(owner, shards) == position
            for _ in range(self._holders.get(ref[0], Counter())[ref[1]])
        ]
        return [(key, row) for (key, _), row in zip(refs, self._release(refs)) if row is not None]

    def _taken_by(self, writers: list[str]) -> list[tuple[str, str]]:
        """Each ``(key, holder)`` reference ``writers`` took, once per time it was taken."""
        wanted = set(writers)
        return [
            (key, holder)
            for (key, holder), by in self._ref_writers.items()
            for writer, n in by.items()
            if writer in wanted
            for _ in range(n)
        ]

    def holds(self, refs: list[tuple[str, str]]) -> list[bool]:
        """Whether each ``(key, holder)`` reference is held, whatever its key's state."""
        return [self._holders.get(k, Counter())[h] > 0 for k, h in refs]

    def release(self, refs: list[tuple[str, str]]) -> list[dict[str, tuple[FieldSpec, Any]] | None]:
        """Drop one reference per ``(key, holder)`` (two for a pair listed twice); a key whose last
        reference went is deleted and its stored fields returned, the others give None. A
        reference not held is refused before anything changes (on a successor it was lost, and
        skipped)."""
        held = self.holds(list(Counter(refs)))
        over = [(k, h) for ((k, h), n), ok in zip(Counter(refs).items(), held) if not ok or self._holders[k][h] < n]
        if over and not self.successor:
            raise KeyMissingError(
                f"cannot release store reference(s) {over[:5]} (key, holder): never taken, already deleted,"
                " or released more often than held"
            )
        return self._release(refs)

    def release_held(self, refs: list[tuple[str, str]]) -> list[dict[str, tuple[FieldSpec, Any]] | None]:
        """``release`` of the references still held, skipping the others: what a deleted key held
        (its writer's ``take_back`` may have dropped them already)."""
        return self._release(refs)

    def _release(self, refs: list[tuple[str, str]]) -> list[dict[str, tuple[FieldSpec, Any]] | None]:
        """``release`` without the check: a reference not held is skipped (lost, or taken back)."""
        out: list[dict[str, tuple[FieldSpec, Any]] | None] = []
        for key, holder in refs:
            if not self.holds([(key, holder)])[0]:
                out.append(None)
                continue
            holders = self._holders[key]
            holders[holder] -= 1
            if holders[holder] == 0:
                del holders[holder]
                self._held_for.pop((key, holder), None)
            writers = self._ref_writers.get((key, holder))
            if writers:  # one reference fewer to take back, whoever drops it
                writer = next(iter(writers))
                writers[writer] -= 1
                if writers[writer] == 0:
                    del writers[writer]
                if not writers:
                    del self._ref_writers[(key, holder)]
            out.append(None if holders else self._drop(key))
        return out

    def _drop(self, key: str) -> dict[str, tuple[FieldSpec, Any]]:
        """Forget ``key`` whatever its state; its writes in flight are orphaned (their commits land
        nowhere). Returns its committed fields and, under ``HELD``, what it held."""
        row = self._rows.pop(key, {})
        self._claim.pop(key, None)
        for token in {entry.write for entry in row.values() if not entry.committed}:
            write = self._writes.get(token)
            if write is not None and not write.orphaned:
                write.orphaned = True
                self._orphans += 1
        held, holds_as = self._holds.pop(key, ()), self._holds_as.pop(key, None)
        self._forget(key)
        self._bytes -= sum(e.spec.nbytes for e in row.values() if e.committed)
        out: dict[str, Any] = {n: (e.spec, e.handles) for n, e in row.items() if e.committed}
        if held:
            out[HELD] = (None, tuple((child, holds_as) for child in held))
        return out

    def _forget(self, key: str) -> None:
        """Drop the holders and writer records of a key that is gone."""
        for holder in self._holders.pop(key, {}):
            self._ref_writers.pop((key, holder), None)
            self._held_for.pop((key, holder), None)
        self._writer_of.pop(key, None)
        self._holds.pop(key, None)
        self._holds_as.pop(key, None)

    def stats(self) -> StoreStats:
        written = sum(self.contains(list(self._rows)))
        return StoreStats(
            keys=len(self._rows) + self._orphans, bytes=self._bytes, written=written, bytes_put=self._bytes_put
        )

    def _committed_row(self, key: str) -> dict[str, _Entry]:
        row = {n: e for n, e in self._rows.get(key, {}).items() if e.committed}
        if not row and key in self._claim:
            raise KeyMissingError(f"store key {key!r} is not written yet: its write is in flight")
        if not row and key in self._rows:
            raise KeyMissingError(
                f"store key {key!r} is not written: its write failed while others held it (the next put_shared "
                "of it writes it)"
            )
        if not row:
            raise self._missing(f"store key {key!r} does not exist (never written, or deleted)")
        return row

    def _missing(self, message: str) -> KeyMissingError | ShardLostError:
        if self.successor:
            return ShardLostError(f"{message}; this index shard restarted, and what it held before was lost")
        return KeyMissingError(message)
