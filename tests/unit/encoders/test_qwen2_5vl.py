"""Qwen2.5-VL's tower as a plug-in gives the model's own image features (windows cut at the
edges included) and a cost that follows its windows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessor
from transformers.vision_utils import get_vision_window_index

from encoders import registry
from encoders.protocol import EncoderError
from encoders.qwen2_5vl import Qwen25VLEncoder
from vlrl.mm import PatchRule, describe_image

RULE = PatchRule(min_pixels=28 * 28, max_pixels=224 * 224)
SIZES = ((140, 84), (112, 112))
"""``(width, height)``: a 6x10 patch grid that 4-patch windows cut at both edges, and an 8x8 one
they tile exactly."""


@pytest.fixture(scope="module")
def model() -> Qwen2_5_VLForConditionalGeneration:
    text = dict(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
    )  # fmt: skip
    vision = dict(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
        window_size=56, fullatt_block_indexes=[1],
    )  # fmt: skip
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision,
        image_token_id=296, video_token_id=297, vision_start_token_id=298, vision_end_token_id=299,
    )  # fmt: skip
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).eval()


def image(width: int, height: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def reference(model, images: list[np.ndarray]) -> tuple[torch.Tensor, ...]:
    """Each image's rows as the model itself encodes them: its processor, ``get_image_features``."""
    processor = Qwen2VLImageProcessor(min_pixels=RULE.min_pixels, max_pixels=RULE.max_pixels)
    inputs = processor(images=images, return_tensors="pt")
    return model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"]).pooler_output


def test_forward_matches_get_image_features(model):
    encoder = Qwen25VLEncoder.from_model(model.model.visual, RULE)
    images = [image(w, h, seed) for seed, (w, h) in enumerate(SIZES)]
    batch = encoder.collate([encoder.preprocess(pixels) for pixels in images])
    assert batch.grid_thw.tolist() == [[1, 6, 10], [1, 8, 8]]
    assert 6 % encoder.config.window_patches and 10 % encoder.config.window_patches  # edge windows
    with torch.no_grad():
        rows, expected = encoder(batch), reference(model, images)
    torch.testing.assert_close(rows, torch.cat(expected), rtol=0, atol=1e-6)
    metas = [describe_image(pixels, rule=RULE) for pixels in images]
    assert [encoder.num_tokens(meta) for meta in metas] == [len(e) for e in expected] == [15, 16]
    assert sum(p.numel() for p in encoder.parameters()) == sum(p.numel() for p in model.model.visual.parameters())


def test_loads_tower_from_whole_checkpoint(model, tmp_path):
    model.save_pretrained(tmp_path / "model")
    adopted = Qwen25VLEncoder.from_model(model.model.visual, RULE)
    torch.manual_seed(1)
    built = adopted.config.build().eval().load(tmp_path / "model")
    batch = built.collate([built.preprocess(image(*SIZES[0]))])
    with torch.no_grad():
        assert torch.equal(built(batch), adopted(batch))
    again = Qwen25VLEncoder(built.config).eval().load(built.save_pretrained(tmp_path / "encoder"))
    with torch.no_grad():
        assert torch.equal(again(batch), adopted(batch))


def test_refuses_a_foreign_rule_or_config(model):
    with pytest.raises(EncoderError, match="'qwen2_5vl': patch rule .* disagrees"):
        Qwen25VLEncoder.from_model(model.model.visual, PatchRule(patch_size=16))
    with pytest.raises(ValueError, match=r"Config.window_size: 20; expected >= .* = 28"):
        Qwen25VLEncoder.Config(window_size=20)
    with pytest.raises(ValueError, match=r"fullatt_block_indexes: \[2\] .* depth=2"):
        Qwen25VLEncoder.Config(depth=2, fullatt_block_indexes=(1, 2))


def test_passes_registry_contract():
    assert list(registry.run_contract("qwen2_5vl")) == [
        "output shape", "num_tokens", "finite output", "cost", "cost monotone",
        "deterministic", "batch order", "gradients",
    ]  # fmt: skip
    assert registry.resolve("qwen2_5vl") is Qwen25VLEncoder


def screen_encoder() -> Qwen25VLEncoder:
    """The tiny tower under a rule that keeps full-HD screens near their size."""
    fields = dict(Qwen25VLEncoder.check_fields, patch_rule=PatchRule(max_pixels=1920 * 1080))
    return Qwen25VLEncoder.Config(**fields).build()


def test_cost_grows_with_area_and_windows_save_attention():
    encoder = screen_encoder()
    sizes = ((320, 240), (1280, 720), (1920, 1080))
    metas = [describe_image(image(w, h), rule=encoder.config.patch_rule) for w, h in sizes]
    costs = [encoder.cost(meta) for meta in metas]
    assert costs == sorted(costs) and len(set(costs)) == 3
    full_attention = dataclasses.replace(encoder.cost_model, window=None)
    assert costs[-1] < full_attention(encoder.grid(metas[-1]))


@pytest.mark.parametrize("grid", [(1, 6, 10), (1, 8, 8), (1, 76, 136)])
def test_cost_attention_follows_the_towers_windows(grid):
    """Windowed minus full-attention cost is exactly the windowed blocks' ``4*d*sum S^2`` change,
    with the windows ``transformers`` cuts."""
    encoder = screen_encoder()
    config, cost = encoder.config, encoder.cost_model
    _, cu_windows = get_vision_window_index(
        torch.tensor([grid]), config.patch_rule.merge_size, config.window_size, config.patch_rule.patch_size
    )
    square_sum = int((cu_windows.diff() ** 2).sum())
    windowed_blocks = config.depth - len(config.fullatt_block_indexes)
    expected = 4 * config.hidden_size * windowed_blocks * (square_sum - (grid[1] * grid[2]) ** 2)
    assert cost(grid) - dataclasses.replace(cost, window=None)(grid) == pytest.approx(expected)


def test_cost_linear_term_counts_the_towers_matmuls():
    """One more block adds twice its matmul weights in FLOPs per patch (QKV, out, SwiGLU's three)."""
    encoder = screen_encoder()
    grid, d = (1, 8, 8), encoder.config.hidden_size
    full = dataclasses.replace(encoder.cost_model, window=None)
    deeper = dataclasses.replace(full, depth=full.depth + 1)
    per_patch = (deeper(grid) - full(grid) - 4 * d * (grid[1] * grid[2]) ** 2) / (grid[1] * grid[2])
    block = encoder.tower.blocks[0]
    assert per_patch == 2 * sum(m.weight.numel() for m in block.modules() if isinstance(m, torch.nn.Linear))
