"""Screenshots shrunk to a token budget: what an older screenshot costs in a long episode's prompt.

The model's processor resizes every image by its patch rule (``smart_resize``), so how many
tokens an image takes follows from its size alone. ``fit_size`` finds the largest size of the
same aspect whose token count is within the budget. The processor then keeps that size: the
count the chat writes is the count the encoder produces.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from vlrl.mm.patch_grid import PatchRule


def min_tokens(rule: PatchRule, width: int, height: int) -> int:
    """The fewest tokens an image of this aspect can take (the processor enlarges anything
    smaller than ``min_pixels``)."""
    return min(rule.num_tokens(*_scaled(width, height, w / width)) for w in range(1, width + 1))


def fit_size(rule: PatchRule, width: int, height: int, max_tokens: int) -> tuple[int, int]:
    """The largest ``(width, height)`` of the image's aspect at most ``max_tokens`` tokens take;
    the image's own size when it already fits. ``ValueError`` when no size fits."""
    if rule.num_tokens(width, height) <= max_tokens:
        return width, height
    if min_tokens(rule, width, height) > max_tokens:
        raise ValueError(
            f"a {width}x{height} screenshot takes at least {min_tokens(rule, width, height)} tokens under the"
            f" model's patch rule (min_pixels={rule.min_pixels}); a budget of {max_tokens} cannot hold it"
        )
    for w in range(width - 1, 0, -1):  # the token count is not monotone in the scale: look at every width
        size = _scaled(width, height, w / width)
        if rule.num_tokens(*size) <= max_tokens:
            return size
    raise AssertionError("unreachable: the smallest size fits, checked above")


def downscale(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``pixels`` resized to ``size`` (width, height) with an area filter, as canonical RGB."""
    if (pixels.shape[1], pixels.shape[0]) == size:
        return pixels
    return np.ascontiguousarray(np.asarray(Image.fromarray(pixels).resize(size, Image.Resampling.BOX)))


def _scaled(width: int, height: int, scale: float) -> tuple[int, int]:
    return max(1, round(width * scale)), max(1, round(height * scale))
