"""Checkpoint I/O: a trainer checkpoint's own files, the Hugging Face and PEFT adapter folders it
writes, and reading a checkpoint back without running code from it.

A step's folder holds ``sharded/`` (DCP: model and optimizer, exact resume), ``trainer.pt``,
``hf/`` (a plain checkpoint folder of the policy's family: ``save_hf_folder``) and, under LoRA,
``adapter/`` (a PEFT adapter folder: ``save_adapter_folder``), which ``merge_adapter`` turns back
into a plain checkpoint folder on its base (what ``vlrl serve`` and ``vlrl eval`` do with one).

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
import json
import pickle
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed.checkpoint as dcp
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.serialization import _get_layout

from vlrl.atomic import atomic_path

if TYPE_CHECKING:
    from vlrl.models.family import ModelFamily

TRAINER_FILE = "trainer.pt"
"""The step count and the caller's extra state, beside ``sharded/`` and ``hf/``."""
METADATA_FILE = ".metadata"
"""DCP's index of a sharded checkpoint, written last by ``dcp.save`` (temporary name, rename)."""
HF_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
            "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "processor_config.json")  # fmt: skip
"""Non-weight files of a checkpoint folder, copied so a saved step loads like the original."""
WEIGHTS_FILE = "model.safetensors"
ADAPTER_DIR = "adapter"
"""Where a LoRA trainer's checkpoint keeps its PEFT adapter folder (``hf/`` holds the merged weights)."""
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

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


# ---- Hugging Face checkpoint folders


def save_hf_folder(folder: str | Path, weights: Mapping[str, torch.Tensor], family: ModelFamily, source: str | Path) -> Path:
    """A plain checkpoint folder of ``family`` at ``folder``: ``weights`` (checkpoint names) in the
    layout its checkpoint files store them (``ModelFamily.checkpoint_tensor``, which vLLM reads
    too), each storage once (safetensors refuses tied tensors), and ``source``'s non-weight files
    (``HF_FILES``), each written atomically."""
    from safetensors.torch import save_file

    folder, source = Path(folder), Path(source)
    folder.mkdir(parents=True, exist_ok=True)
    stored = {name: family.checkpoint_tensor(name, value).contiguous() for name, value in weights.items()}
    storages: set[int] = set()
    for name, value in stored.items():  # tied weights: each name gets its own bytes
        if value.untyped_storage().data_ptr() in storages:
            stored[name] = value.clone()
        storages.add(stored[name].untyped_storage().data_ptr())
    with atomic_path(folder / WEIGHTS_FILE) as tmp:
        save_file(stored, str(tmp), metadata={"format": "pt"})
    for name in HF_FILES:
        if (source / name).exists():
            with atomic_path(folder / name) as tmp:
                shutil.copy(source / name, tmp)
    return folder


# ---- PEFT adapter folders


def save_adapter_folder(path: str | Path, tensors: Mapping[str, torch.Tensor], settings: Mapping[str, Any]) -> Path:
    """A PEFT adapter folder at ``path``: ``tensors`` (PEFT's names, ``base_model.model.M.lora_A.weight``)
    in ``ADAPTER_WEIGHTS`` and ``settings`` (a ``LoraConfig``'s fields) in ``ADAPTER_CONFIG``, each
    written atomically; a local base folder is recorded by its absolute path, so the adapters are
    found from anywhere."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with atomic_path(path / ADAPTER_WEIGHTS) as tmp:
        save_file({name: value.contiguous() for name, value in tensors.items()}, str(tmp), metadata={"format": "pt"})
    settings = dict(settings)
    base = Path(settings.get("base_model_name_or_path") or "")
    if base.is_dir():
        settings["base_model_name_or_path"] = str(base.resolve())
    with atomic_path(path / ADAPTER_CONFIG) as tmp:
        tmp.write_text(json.dumps(settings, indent=2, default=_jsonable))
    return path


def is_adapter_folder(path: str | Path) -> bool:
    """Whether ``path`` is a PEFT adapter folder (it holds ``adapter_config.json``)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(adapter: str | Path) -> Path:
    """The base checkpoint folder a PEFT adapter folder records (``base_model_name_or_path``);
    FileNotFoundError when that is no checkpoint folder here."""
    base = json.loads((Path(adapter) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path") or ""
    if not (Path(base) / "config.json").is_file():
        raise FileNotFoundError(
            f"{adapter}: its base model {base!r} (adapter_config.json's base_model_name_or_path) is not a checkpoint"
            " folder here; give the base as the model and the adapter folder beside it (--adapter)"
        )
    return Path(base)


def merge_adapter(adapter: str | Path, out: str | Path, base: str | Path | None = None) -> Path:
    """A plain checkpoint folder at ``out``: the PEFT adapter folder ``adapter`` merged by PEFT
    (``merge_and_unload``: every adapted weight ``W + scale B A``, ``modules_to_save`` as trained)
    into ``base`` (default: the base the folder records), in the base's family layout and dtype,
    with the base's processor and config files. Loads in float32 whatever the base's dtype."""
    from peft import PeftModel

    from vlrl.models import family_of

    base = Path(base) if base is not None else adapter_base(adapter)
    family = family_of(str(base))
    model = family.load(base)
    dtype = getattr(model.config, "dtype", None) or torch.float32
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    weights = {name: value.to(dtype) if value.is_floating_point() else value for name, value in merged.state_dict().items()}
    return save_hf_folder(out, weights, family, base)


def _jsonable(value: object) -> object:
    """What ``LoraConfig.to_dict`` holds that JSON lacks (sets, enums)."""
    if isinstance(value, set):
        return sorted(value)
    return getattr(value, "value", str(value))
