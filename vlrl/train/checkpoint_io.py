"""A trainer checkpoint's own files, and reading a checkpoint back without running code from it.

A run folder is data: a resume must not execute what someone put in it, and pickle calls whatever
a file names. So every pickle of a checkpoint goes through a restricted unpickler:

- ``trainer.pt`` (step count, the caller's extra state) loads with ``torch.load(weights_only=True)``:
  containers, numbers, strings and tensors only.
- ``sharded/`` is ``torch.distributed.checkpoint`` (DCP). Its tensors already load weights-only,
  but its ``FileSystemReader`` unpickles ``.metadata`` unrestricted and its ``DefaultLoadPlanner``
  loads non-tensor entries (optimizer hyper-parameters) with ``weights_only=False``. Here the
  metadata first passes an unpickler that resolves only DCP's metadata classes, ``torch.Size``,
  dtypes and the platform's path class, and sets state (``BUILD``) only on instances of those
  classes, never on a class or function itself (that would rewrite it for the whole process);
  each non-tensor entry first passes torch's weights-only unpickler. DCP then unpickles the same
  bytes, so it meets only what passed.

A refused file raises ``pickle.UnpicklingError`` naming what it refused; nothing it names has run.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.serialization import _get_layout

from vlrl.atomic import atomic_path

TRAINER_FILE = "trainer.pt"
"""The step count and the caller's extra state, beside ``sharded/`` and ``hf/``."""
METADATA_FILE = ".metadata"
"""DCP's index of a sharded checkpoint, written last by ``dcp.save`` (temporary name, rename)."""

_METADATA_CLASSES = (
    dcp_metadata.Metadata, dcp_metadata.StorageMeta, dcp_metadata.MetadataIndex,
    dcp_metadata.TensorStorageMetadata, dcp_metadata.BytesStorageMetadata, dcp_metadata.ChunkStorageMetadata,
    dcp_metadata.TensorProperties, dcp_metadata._MEM_FORMAT_ENCODING, _StorageInfo,
    torch.Size, _get_layout, type(Path()),
)  # fmt: skip
_METADATA_GLOBALS = {(g.__module__, g.__qualname__): g for g in _METADATA_CLASSES} | {
    ("torch", str(d).removeprefix("torch.")): d for d in vars(torch).values() if isinstance(d, torch.dtype)
}
"""What a ``.metadata`` pickle may name, keyed as pickle names it: (module, qualified name)."""
_BUILDABLE = frozenset(g for g in _METADATA_CLASSES if isinstance(g, type))
"""Whose instances a ``.metadata`` pickle may set state on (``BUILD``); never a class or function itself."""


class _MetadataUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, whose opcodes can be overridden (the C one's cannot)."""

    def find_class(self, module: str, name: str) -> Any:
        found = _METADATA_GLOBALS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(
                f"refused global {module}.{name}: a DCP {METADATA_FILE} names only DCP's metadata classes, "
                "torch.Size, dtypes and paths"
            )
        return found

    def load_build(self) -> None:
        target = self.stack[-2]
        if type(target) not in _BUILDABLE:
            what = getattr(target, "__qualname__", None) or f"a {type(target).__qualname__}"
            raise pickle.UnpicklingError(f"refused BUILD on {what}: only DCP's metadata records take state")
        super().load_build()

    dispatch = {**pickle._Unpickler.dispatch, pickle.BUILD[0]: load_build}


class _CheckedReader(FileSystemReader):
    def read_metadata(self, *args: Any, **kwargs: Any) -> dcp_metadata.Metadata:
        path = Path(self._get_metadata_path(kwargs.get("rank")))  # the file super() reads: global or rank-local
        with path.open("rb") as f, _refused(path):
            _MetadataUnpickler(f).load()
        return super().read_metadata(*args, **kwargs)


class _CheckedPlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        with _refused(f"sharded entry {read_item.dest_index.fqn}"):
            torch.load(value, weights_only=True)
        value.seek(0)
        super().load_bytes(read_item, value)


def load_sharded(state: dict[str, Any], folder: str | Path) -> None:
    """``dcp.load`` of ``folder`` into ``state`` in place, every pickle checked first. Collective."""
    dcp.load(state, storage_reader=_CheckedReader(str(folder)), planner=_CheckedPlanner())


def save_trainer_file(path: str | Path, step: int, extra: Mapping[str, Any]) -> None:
    """``trainer.pt``: the step count and the caller's extra state (plain data), written atomically."""
    with atomic_path(path) as tmp:
        torch.save({"step": step, "extra": dict(extra)}, tmp)


def load_trainer_file(path: str | Path) -> dict[str, Any]:
    """``save_trainer_file``'s ``{"step": int, "extra": dict}``, loaded weights-only."""
    with _refused(path):
        return torch.load(path, weights_only=True)


@contextmanager
def _refused(where: object) -> Iterator[None]:
    """Names the file or entry in a refusal (torch's own message does not)."""
    try:
        yield
    except pickle.UnpicklingError as e:
        raise pickle.UnpicklingError(f"{where}: {e}") from None
