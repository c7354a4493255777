"""Model families by name, on the generic ``vlrl.registry`` (entry-point group ``vlrl.models``),
and the detection of a checkpoint folder's family from its ``config.json``.

Detection runs where a config is validated, before any actor starts: an unsupported checkpoint
fails there, naming its ``model_type`` and the supported families, instead of deep inside
``from_pretrained`` (which loads a Qwen2.5-VL folder as Qwen2-VL with mismatched sizes).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoProcessor

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


def _check(spec: PluginSpec, factory: Callable[..., Any]) -> None:
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


REGISTRY = Registry("model family", MODELS, _check, error=lambda i, m: ModelFamilyError(f"model family {i!r}: {m}"))
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
    model_type = fields.get("model_type")
    families = {name: family(name) for name in registered()}
    claiming = [found for found in families.values() if model_type in found.model_types]
    if len(claiming) > 1:
        raise ModelFamilyError(
            f"model_path {str(model_path)!r}: model_type={model_type!r} is claimed by the families"
            f" {[f.name for f in claiming]}; register one of them with override=True in place of the other"
        )
    if claiming:
        return claiming[0]
    supported = ", ".join(f"{name} (model_type {'/'.join(f.model_types)})" for name, f in families.items())
    raise ModelFamilyError(
        f"model_path {str(model_path)!r} is a model_type={model_type!r} checkpoint"
        f" ({', '.join(fields.get('architectures') or ['no architectures'])}); supported model families: {supported}"
    )


def run_contract(name: str) -> Iterator[str]:
    """The whole contract on family ``name`` (``vlrl check model``), yielding each rule once it
    passed and raising ``ContractError`` at the first broken one: the construct-time rules, then
    on the family's tiny build: it loads as the family's class and is detected back ('tiny build'),
    its tower as a plug-in passes the encoder contract ('tower encoder: RULE'), and the plug-in's
    rows equal the model's own image features, every DeepStack level included ('tower rows')."""
    from encoders.registry import contract
    from vlrl.models.tiny import build_tiny

    spec = REGISTRY.spec(name)
    factory = REGISTRY.load(spec)
    _check(spec, factory)
    yield from ("family class", "name", "model types", "model class")
    found = factory()
    with tempfile.TemporaryDirectory() as folder:
        path = build_tiny(found, Path(folder) / name)
        model = found.load(path).eval()
        if type(model) is not found.model_class or family_of(path).name != name:
            raise ContractError("tiny build", f"the tiny build of {name!r} loads as {type(model).__name__}")
        yield "tiny build"
        processor = AutoProcessor.from_pretrained(str(path))
    encoder = found.tower_encoder(model, processor).eval()
    for rule in contract(encoder):
        yield f"tower encoder: {rule}"
    yield _check_tower_rows(encoder, model, processor)


def _check_tower_rows(encoder: Any, model: Any, processor: Any) -> str:
    pixels = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    images = processor.image_processor(images=[pixels], return_tensors="pt")
    with torch.no_grad():
        own = model.model.get_image_features(images["pixel_values"], images["image_grid_thw"])
        expected = torch.cat([own.pooler_output[0], *(level[0] for level in getattr(own, "deepstack_features", None) or [])], -1)
        rows = encoder(encoder.collate([encoder.preprocess(pixels)]))
    if rows.shape != expected.shape or not torch.allclose(rows, expected, atol=1e-5):
        raise ContractError(
            "tower rows", f"the plug-in gives rows {tuple(rows.shape)} that differ from the model's own {tuple(expected.shape)}"
        )
    return "tower rows"
