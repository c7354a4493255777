"""The Qwen3-VL tower plug-in: the model's own image features (merged rows and every DeepStack
level) through the plug-in path, on the checkpoint processor's grids."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoProcessor, Qwen2VLImageProcessor, Qwen3VLForConditionalGeneration

from encoders import registry
from encoders.protocol import EncoderError
from encoders.qwen3vl import Qwen3VLEncoder
from vlrl.mm import PatchRule, describe_image, patch_rule_of
from vlrl.models import build_tiny

SIZES = [(100, 60), (64, 160)]
"""``(width, height)`` of the images checked: a landscape and a portrait grid."""


@pytest.fixture(scope="module")
def qwen3_path(tmp_path_factory):
    return build_tiny("qwen3_vl", tmp_path_factory.mktemp("tiny-qwen3vl"))


@pytest.fixture(scope="module")
def model(qwen3_path):
    return Qwen3VLForConditionalGeneration.from_pretrained(qwen3_path, dtype=torch.float64).eval()


@pytest.fixture(scope="module")
def processor(qwen3_path):
    return AutoProcessor.from_pretrained(qwen3_path)


def image(width: int, height: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_processor_is_qwen2vl_class_with_16px_patches(processor):
    assert type(processor.image_processor) is Qwen2VLImageProcessor
    assert processor.image_processor.patch_size == 16
    rule = patch_rule_of(processor)
    for width, height in [*SIZES, (321, 243), (17, 900)]:
        grid = processor.image_processor(images=[image(width, height)], return_tensors="pt")["image_grid_thw"][0]
        assert tuple(grid.tolist()) == rule.grid(width, height)


@pytest.mark.parametrize("width, height", SIZES)
def test_forward_is_the_models_image_features(model, processor, width, height):
    encoder = Qwen3VLEncoder.from_model(model.model.visual, patch_rule_of(processor))
    assert encoder.feature_levels == 2 and encoder.hidden_size == 64
    pixels = image(width, height, seed=width)
    prepared = encoder.preprocess(pixels)
    theirs = processor.image_processor(images=[pixels], return_tensors="pt")
    torch.testing.assert_close(prepared.pixel_values, theirs["pixel_values"], rtol=0, atol=0)  # mean/std 0.5 too
    assert prepared.num_tokens == encoder.num_tokens(describe_image(pixels, rule=encoder.config.patch_rule))
    with torch.no_grad():
        rows = encoder(encoder.collate([prepared]))  # (tokens, 64 * 2)
        features = model.get_image_features(theirs["pixel_values"], theirs["image_grid_thw"])
    assert rows.shape == (prepared.num_tokens, 128)
    expected = torch.cat([features.pooler_output[0], *(level[0] for level in features.deepstack_features)], dim=1)
    torch.testing.assert_close(rows, expected, rtol=0, atol=1e-12)
    assert not torch.allclose(rows[:, :64], rows[:, 64:])  # the DeepStack level is a feature of its own


def test_registered_builtin_passes_contract():
    assert "qwen3vl" in registry.registered()
    torch.manual_seed(0)
    encoder = registry.make("qwen3vl", **Qwen3VLEncoder.check_fields)
    assert encoder.feature_levels == 2 and encoder.row_width == 2 * encoder.hidden_size
    registry.check_encoder(encoder, [image(70, 50, 1), image(130, 90, 2)])


def test_loads_the_tower_from_a_whole_checkpoint(model, qwen3_path):
    encoder = registry.make("qwen3vl", **Qwen3VLEncoder.check_fields)
    encoder.load(qwen3_path)  # model.visual.* of the checkpoint
    for name, value in model.model.visual.state_dict().items():
        torch.testing.assert_close(encoder.tower.state_dict()[name], value.float(), rtol=0, atol=0)


def test_contract_names_the_levels_when_rows_are_too_narrow():
    encoder = registry.make("qwen3vl", **Qwen3VLEncoder.check_fields)
    encoder.feature_levels = 3  # claims one level more than the tower gives
    with pytest.raises(EncoderError, match=r"expected \(n_tokens, 192\): hidden_size 64 x feature_levels 3"):
        registry.check_encoder(encoder)


def test_refuses_another_patch_rule_and_bad_config(model):
    with pytest.raises(EncoderError, match="qwen3vl.*disagrees with the tower"):
        Qwen3VLEncoder.from_model(model.model.visual, PatchRule())  # Qwen2-VL's 14 px patches
    with pytest.raises(ValueError, match=r"deepstack_visual_indexes: \(1, 0\); expected increasing"):
        Qwen3VLEncoder.Config(depth=2, deepstack_visual_indexes=(1, 0))
    with pytest.raises(ValueError, match="num_position_embeddings: 60; expected a square"):
        Qwen3VLEncoder.Config(num_position_embeddings=60)
