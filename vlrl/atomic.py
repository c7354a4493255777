"""Atomic file writes: a reader, or a resume after a crash, sees the old file or the whole new one,
never a torn one.

The writer fills a temporary name in the target's folder (same file system, so the rename is
atomic), the data is flushed to disk (``fsync``), ``os.replace`` puts it in place, and an
``fsync`` of the folder makes the rename itself survive a power loss. Imports nothing else of
vlrl: the trainer and the job both write checkpoint files with it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """A temporary path beside ``target`` for the caller to write a file at; on a clean exit it
    replaces ``target``, on an exception it is removed and ``target`` is left as it was."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        fsync(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    fsync(target.parent)


def write_bytes_atomic(target: str | Path, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def fsync(path: str | Path) -> None:
    """Flushes a file's data, or a folder's entries (files created or renamed into it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
