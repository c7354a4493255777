"""Model families by name, on the generic ``vlrl.registry`` (entry-point group ``vlrl.models``),
and the detection of a checkpoint folder's family from its ``config.json``.

Detection runs where a config is validated, before any actor starts: an unsupported checkpoint
fails there, naming its ``model_type`` and the supported families, instead of deep inside
``from_pretrained`` (which loads a Qwen2.5-VL folder as Qwen2-VL with mismatched sizes).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vlrl.models.family import ModelFamily
from vlrl.registry import MODELS, ContractError, PluginSpec, Registry

BUILTINS = {
    "qwen2_vl": "vlrl.models.qwen2_vl:Qwen2VL",
    "qwen2_5_vl": "vlrl.models.qwen2_5_vl:Qwen25VL",
    "qwen3_vl": "vlrl.models.qwen3_vl:Qwen3VL",
    "qwen3_vl_moe": "vlrl.models.qwen3_vl_moe:Qwen3VLMoe",
    "qwen3_5": "vlrl.models.qwen3_5:Qwen35",
}


class ModelFamilyError(ValueError):
    """An unknown family, a folder that is not a checkpoint, or a checkpoint of no known family."""


def check_class(spec: PluginSpec, factory: Callable[..., Any]) -> None:
    """The construct-time rules of a family (cheap: no model is built)."""
    if not (isinstance(factory, type) and issubclass(factory, ModelFamily)):
        raise ContractError("family class", f"{factory!r} is not a vlrl.models.ModelFamily subclass")
    if getattr(factory, "name", None) != spec.id:
        raise ContractError("name", f"{factory.__name__}.name is {getattr(factory, 'name', None)!r}, registered as {spec.id!r}")
    types = getattr(factory, "model_types", None)
    if not (isinstance(types, tuple) and types and all(isinstance(t, str) and t for t in types)):
        raise ContractError("model types", f"{factory.__name__}.model_types is {types!r}; expected a tuple of model_type strings")
    if not hasattr(getattr(factory, "model_class", None), "from_pretrained"):
        raise ContractError("model class", f"{factory.__name__}.model_class has no from_pretrained")


REGISTRY = Registry("model family", MODELS, check_class, error=lambda i, m: ModelFamilyError(f"model family {i!r}: {m}"))
for _name, _path in BUILTINS.items():
    REGISTRY.register(_name, _path)


def register(name: str, family: type[ModelFamily] | str, *, override: bool = False) -> PluginSpec:
    """Register a ``ModelFamily`` subclass (or a ``"module:Class"`` path) as ``name``."""
    return REGISTRY.register(name, family, override=override)


def registered() -> list[str]:
    """Family names, built in or installed as entry points."""
    return REGISTRY.registered()


def family(name: str) -> ModelFamily:
    """The family registered as ``name``."""
    return REGISTRY.make(name)


def family_of(model_path: str | Path) -> ModelFamily:
    """The family of the checkpoint folder ``model_path``, from its ``config.json``."""
    config = Path(model_path) / "config.json"
    if not config.is_file():
        raise ModelFamilyError(f"model_path {str(model_path)!r} has no config.json; expected a Hugging Face checkpoint folder")
    try:
        fields = json.loads(config.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ModelFamilyError(f"{config}: not readable JSON ({error})") from None
    return family_of_type(
        fields.get("model_type"), what=f"model_path {str(model_path)!r}", architectures=fields.get("architectures") or ()
    )


def family_of_type(model_type: str | None, *, what: str = "a model", architectures: Sequence[str] = ()) -> ModelFamily:
    """The family whose checkpoints have ``model_type`` (``config.json``'s, or a loaded model's
    ``config.model_type``); ``what`` and ``architectures`` name the model in an error."""
    families = {name: family(name) for name in registered()}
    claiming = [found for found in families.values() if model_type in found.model_types]
    if len(claiming) > 1:
        raise ModelFamilyError(
            f"{what}: model_type={model_type!r} is claimed by the families"
            f" {[f.name for f in claiming]}; register one of them with override=True in place of the other"
        )
    if claiming:
        return claiming[0]
    supported = ", ".join(f"{name} (model_type {'/'.join(f.model_types)})" for name, f in families.items())
    raise ModelFamilyError(
        f"{what} is a model_type={model_type!r} checkpoint"
        f" ({', '.join(architectures or ['no architectures'])}); supported model families: {supported}"
    )
