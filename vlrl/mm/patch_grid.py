"""Patch grids and token counts of Qwen2-VL / Qwen2.5-VL images from width and height alone.

The encoder planner balances image items by token count without seeing pixels, so the count
must follow the processor's rules exactly. These mirror ``transformers``'
``Qwen2VLImageProcessor`` (shared by Qwen2.5-VL), which a test checks on common screen sizes:

1. ``smart_resize`` rounds each side to a multiple of ``factor = patch_size * merge_size`` and
   rescales (keeping the aspect ratio) until ``min_pixels <= h * w <= max_pixels``;
2. the resized image is cut into ``patch_size`` patches: ``grid = (t, h / patch, w / patch)``
   with ``t = 1`` for a still image (it is repeated to fill one temporal patch);
3. every ``merge_size x merge_size`` block of patches becomes one LLM token:
   ``num_tokens = t * gh * gw / merge_size**2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vlrl.mm.canonical import check_dimensions
from vlrl.mm.errors import ImageError

MAX_ASPECT_RATIO = 200
"""The processor refuses longer strips; so do we, rather than predict a grid it never makes."""


def smart_resize(
    height: int,
    width: int,
    *,
    factor: int = 28,
    min_pixels: int = 56 * 56,
    max_pixels: int = 14 * 14 * 4 * 1280,
) -> tuple[int, int]:
    """Return the ``(height, width)`` the Qwen2-VL processor resizes an image to.

    Python's ``round`` (half to even) is kept on purpose: it is what the processor uses.
    """
    check_dimensions(width, height)
    aspect = max(height, width) / min(height, width)
    if aspect > MAX_ASPECT_RATIO:
        raise ImageError(
            f"image: {width}x{height} pixels has aspect ratio {aspect:.1f}; the Qwen2-VL"
            f" processor accepts at most {MAX_ASPECT_RATIO}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True, slots=True, kw_only=True)
class PatchRule:
    """The processor settings that fix an image's patch grid; defaults are Qwen2-VL's.

    Qwen2.5-VL checkpoints ship the same rule with ``max_pixels=12845056``.
    """

    patch_size: int = 14
    """Side of one vision patch, in resized pixels."""
    merge_size: int = 2
    """Side of the block of patches merged into one LLM token."""
    temporal_patch_size: int = 2
    """Frames per temporal patch; a still image is repeated to fill one, so its ``t`` is 1."""
    min_pixels: int = 56 * 56
    """Smaller images are upscaled to at least this many pixels."""
    max_pixels: int = 28 * 28 * 1280
    """Larger images are downscaled to at most this many pixels."""

    def __post_init__(self) -> None:
        for name in ("patch_size", "merge_size", "temporal_patch_size", "min_pixels", "max_pixels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PatchRule.{name}: {value!r}; expected an int >= 1")
        if self.min_pixels > self.max_pixels:
            raise ValueError(
                f"PatchRule.min_pixels: {self.min_pixels}; expected <= max_pixels"
                f" ({self.max_pixels})"
            )

    @property
    def factor(self) -> int:
        """Each resized side is a multiple of this, so patches tile and merge exactly."""
        return self.patch_size * self.merge_size

    def grid(self, width: int, height: int) -> tuple[int, int, int]:
        """Return ``(t, gh, gw)``, the processor's ``image_grid_thw`` for one image."""
        resized_h, resized_w = smart_resize(
            height,
            width,
            factor=self.factor,
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
        )
        return 1, resized_h // self.patch_size, resized_w // self.patch_size

    def num_tokens(self, width: int, height: int) -> int:
        """Return how many LLM tokens the image becomes after patch merging."""
        t, gh, gw = self.grid(width, height)
        return t * gh * gw // self.merge_size**2


def patch_rule_of(processor: Any) -> PatchRule:
    """The ``PatchRule`` that predicts a Qwen2-VL processor's image grids and token counts (read
    from its ``image_processor``; no transformers import needed here)."""
    images = processor.image_processor
    return PatchRule(
        patch_size=images.patch_size,
        merge_size=images.merge_size,
        temporal_patch_size=images.temporal_patch_size,
        min_pixels=images.size["shortest_edge"],
        max_pixels=images.size["longest_edge"],
    )
