"""PatchRule and smart_resize reproduce transformers' Qwen2-VL image processor exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import Qwen2VLImageProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as hf_smart_resize

from vlrl.mm import ImageError, PatchRule, smart_resize

RULES = {
    "qwen2-vl": PatchRule(),
    "qwen2.5-vl": PatchRule(max_pixels=12_845_056),
    "tight": PatchRule(min_pixels=256 * 28 * 28, max_pixels=512 * 28 * 28),
}

SCREENS = [
    (1170, 2532),  # phone, portrait
    (2532, 1170),  # phone, landscape
    (1280, 720),
    (1366, 768),
    (1920, 1080),
    (2560, 1440),
    (1024, 768),
    (800, 600),
    (20, 20),  # tiny: upscaled to min_pixels
    (5000, 30),  # extreme strip, aspect 166.7
    (27, 5400),  # extreme strip at exactly aspect 200
    (1, 1),
]


@pytest.fixture(scope="module", params=list(RULES))
def rule_and_processor(request: pytest.FixtureRequest) -> tuple[PatchRule, Qwen2VLImageProcessor]:
    rule = RULES[request.param]
    processor = Qwen2VLImageProcessor(
        size={"shortest_edge": rule.min_pixels, "longest_edge": rule.max_pixels},
        patch_size=rule.patch_size,
        merge_size=rule.merge_size,
        temporal_patch_size=rule.temporal_patch_size,
    )
    return rule, processor


@pytest.mark.parametrize(("width", "height"), SCREENS, ids=[f"{w}x{h}" for w, h in SCREENS])
def test_grid_matches_the_processor(
    rule_and_processor: tuple[PatchRule, Qwen2VLImageProcessor], width: int, height: int
) -> None:
    rule, processor = rule_and_processor
    out = processor(
        images=np.zeros((height, width, 3), np.uint8),
        input_data_format="channels_last",
        return_tensors="np",
    )
    (grid,) = out["image_grid_thw"].tolist()
    assert rule.grid(width, height) == tuple(grid)
    assert out["pixel_values"].shape[0] == grid[0] * grid[1] * grid[2]
    patches = processor.get_number_of_image_patches(height, width)
    assert rule.num_tokens(width, height) == patches // rule.merge_size**2


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(1, 12_000),
    width=st.integers(1, 12_000),
    rule=st.sampled_from(list(RULES.values())),
)
def test_smart_resize_matches_transformers(height: int, width: int, rule: PatchRule) -> None:
    bounds = {"factor": rule.factor, "min_pixels": rule.min_pixels, "max_pixels": rule.max_pixels}
    try:
        expected = hf_smart_resize(height, width, **bounds)
    except ValueError:
        with pytest.raises(ImageError, match="aspect ratio"):
            smart_resize(height, width, **bounds)
    else:
        assert smart_resize(height, width, **bounds) == expected


@pytest.mark.parametrize(("width", "height"), [(5000, 20), (1, 201), (32768, 1)])
def test_aspect_ratio_over_200_is_refused_like_the_processor(width: int, height: int) -> None:
    with pytest.raises(ValueError):
        hf_smart_resize(height, width)
    message = rf"image: {width}x{height} pixels has aspect ratio .* at most 200"
    with pytest.raises(ImageError, match=message):
        PatchRule().grid(width, height)


def test_num_tokens_is_grid_over_merge_area() -> None:
    """1080p is 2.07 Mpx > 1 Mpx: scaled by 1/1.4375 and floored to 728x1316, 52x94 patches."""
    rule = PatchRule()
    assert rule.grid(1920, 1080) == (1, 52, 94)
    assert rule.num_tokens(1920, 1080) == 52 * 94 // 4


def test_zero_size_is_refused() -> None:
    with pytest.raises(ImageError, match=r"image: 0x720 pixels; width and height must be >= 1"):
        PatchRule().grid(0, 720)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"patch_size": 0}, r"^PatchRule.patch_size: 0; expected an int >= 1$"),
        ({"merge_size": 2.0}, r"^PatchRule.merge_size: 2.0; expected an int >= 1$"),
        ({"temporal_patch_size": True}, r"^PatchRule.temporal_patch_size: True; expected"),
        ({"min_pixels": -1}, r"^PatchRule.min_pixels: -1; expected an int >= 1$"),
        ({"min_pixels": 5000, "max_pixels": 4000}, r"^PatchRule.min_pixels: 5000; expected <= max"),
    ],
)
def test_bad_rule(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PatchRule(**kwargs)
