"""Named shared-memory segments holding a set of arrays, mapped read-only by other processes.

A segment is one file on a memory-backed filesystem (``/dev/shm``, tmpfs): its pages are node
memory, held once however many processes map it. Lifecycle, as the TP-group packer drives it:

1. ``create``: the writer makes the file (named by a fresh uuid, mode 0600), sizes it and maps
   it read-write; the arrays it returns are where the data is written, in place.
2. The writer sends the ``SegmentHandle`` (path, size, array offsets: a few hundred bytes) to
   the readers; each ``attach``-es it, which maps the file read-only (``PROT_READ``: writing
   through the views is impossible, not merely discouraged). The writer attaches too, and drops
   its writable arrays.
3. Once every reader has attached, the writer ``unlink``-s the name. The pages live on while any
   mapping does, and nothing is left behind in ``/dev/shm`` even if a process dies later.
4. Each process unmaps when its last view of the arrays is garbage-collected; when the last
   process has, the kernel frees the memory.
"""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

SEGMENT_PREFIX = "vlrl-pack-"
_ALIGN = 64  # every array starts on a cache line (and on any dtype's alignment)


class ArraySpec(NamedTuple):
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int


class SegmentHandle(NamedTuple):
    """All a reader needs to map a segment: small and picklable."""

    path: str
    size: int
    arrays: tuple[ArraySpec, ...]


def create(
    directory: str, specs: Mapping[str, tuple[tuple[int, ...], str]]
) -> tuple[SegmentHandle, dict[str, np.ndarray]]:
    """A new segment in ``directory`` laid out for ``name -> (shape, dtype)``, and writable arrays over it."""
    arrays, offset = [], 0
    for name, (shape, dtype) in specs.items():
        arrays.append(ArraySpec(name, np.dtype(dtype).name, tuple(shape), offset))
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        offset += -(-nbytes // _ALIGN) * _ALIGN
    path = os.path.join(directory, f"{SEGMENT_PREFIX}{uuid.uuid4().hex}")
    handle = SegmentHandle(path, max(offset, 1), tuple(arrays))  # mmap refuses 0 bytes
    fd = os.open(handle.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, handle.size)
        memory = mmap.mmap(fd, handle.size)
    except BaseException:
        os.unlink(handle.path)
        raise
    finally:
        os.close(fd)
    return handle, _views(memory, handle)


def attach(handle: SegmentHandle) -> dict[str, np.ndarray]:
    """Read-only arrays over the segment; it stays mapped while any of them (or a view) lives."""
    fd = os.open(handle.path, os.O_RDONLY)
    try:
        memory = mmap.mmap(fd, handle.size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    return _views(memory, handle)


def unlink(handle: SegmentHandle) -> None:
    """Remove the segment's name; mapped pages stay valid until their last mapping goes."""
    os.unlink(handle.path)


def _views(memory: mmap.mmap, handle: SegmentHandle) -> dict[str, np.ndarray]:
    views = {}
    for spec in handle.arrays:
        count = int(np.prod(spec.shape, dtype=np.int64))
        views[spec.name] = np.frombuffer(memory, spec.dtype, count, spec.offset).reshape(spec.shape)
    return views
