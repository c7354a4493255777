"""Writes one writer made, kept so that they can be taken back when its result is thrown away.

A trajectory writes its sequences and takes image references at the end of a rollout. When that
result never reaches the driver (a later write failed, or the loop host gave up on the tenant
while its thread was still writing), nobody would ever delete those keys. The writer therefore
writes through a ``WriteLedger``; ``take_back`` deletes every sequence key and drops every image
reference written so far, and a write that completes after it is taken back at once by the
writer itself. Whatever the interleaving, each write is either kept or taken back exactly once.
If the writer's process dies, its writes carry its ``writer`` name, and ``PayloadStore.take_back``
undoes them from anywhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from vlrl.store.errors import WritesTakenBackError

T = TypeVar("T")


class WriteLedger:
    def __init__(self, owner: str, *, writer: str | None = None) -> None:
        self.owner = owner
        self.writer = writer
        """Named on every write, so that the store can take them back if this process dies."""
        self._lock = threading.Lock()
        self._written: list[tuple[Any, str, str | None]] = []  # (store, key, holder of a shared key)
        self._taken_back = False

    def put(self, store: Any, key: str, fields: Mapping[str, Any]) -> None:
        self._check()
        store.put(key, fields, writer=self.writer)
        self._record(store, key, None)

    def put_shared(self, store: Any, key: str, fields: Mapping[str, Any], *, holder: str) -> bool:
        return self.hold(store, key, holder, lambda writer: store.put_shared(key, fields, holder=holder, writer=writer))

    def hold(self, store: Any, key: str, holder: str, take: Callable[[str | None], T]) -> T:
        """The reference to ``key`` for ``holder`` that ``take(writer)`` takes (writing the key if it
        is absent, however it writes it), kept to be dropped at ``take_back``."""
        self._check()
        result = take(self.writer)
        self._record(store, key, holder)
        return result

    def take_back(self) -> None:
        """Delete the keys written and drop the references taken so far; refuse later writes."""
        with self._lock:
            self._taken_back = True
            written, self._written = self._written, []
        errors = []
        for store, key, holder in reversed(written):
            try:
                _undo(store, key, holder)
            except Exception as error:  # undo the rest anyway, then report the first failure
                errors.append(error)
        if errors:
            raise errors[0]

    def _check(self) -> None:
        if self._taken_back:
            raise WritesTakenBackError(f"{self.owner}: writes were taken back (its result was discarded)")

    def _record(self, store: Any, key: str, holder: str | None) -> None:
        with self._lock:
            if not self._taken_back:
                self._written.append((store, key, holder))
                return
        _undo(store, key, holder)  # completed after take_back: nobody else will undo it
        self._check()


def _undo(store: Any, key: str, holder: str | None) -> None:
    if holder is not None:
        store.release([(key, holder)])
    else:
        store.delete([key], missing_ok=True)
