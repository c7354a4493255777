"""The model-family contract checker (``vlrl check model NAME``): the construct-time rules of a
registered family, then its tiny build, its tower as an encoder plug-in and the plug-in's rows
against the model's own image features."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoProcessor

from encoders.registry import contract
from vlrl.models.registry import REGISTRY, check_class, family_of
from vlrl.models.tiny import build_tiny
from vlrl.registry import ContractError


def run_contract(name: str) -> Iterator[str]:
    """The whole contract on family ``name`` (``vlrl check model``), yielding each rule once it
    passed and raising ``ContractError`` at the first broken one: the construct-time rules, then
    on the family's tiny build: it loads as the family's class and is detected back ('tiny build'),
    its tower as a plug-in passes the encoder contract ('tower encoder: RULE'), and the plug-in's
    rows equal the model's own image features, every DeepStack level included ('tower rows')."""
    spec = REGISTRY.spec(name)
    factory = REGISTRY.load(spec)
    check_class(spec, factory)
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
