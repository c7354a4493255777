"""The one canonical image form: RGB ``uint8`` ``[H, W, 3]``.

Hashes, store payloads and item metadata are computed on this form only, so the same screenshot
gets the same identity whether it arrived as PNG bytes, a PIL image or an array.
"""

from __future__ import annotations

import numpy as np

from vlrl.mm.errors import ImageError


def check_dimensions(width: int, height: int, *, field: str = "image") -> None:
    """Refuse an empty image: no encoder, hash or store row has a meaning for zero pixels."""
    if width < 1 or height < 1:
        raise ImageError(f"{field}: {width}x{height} pixels; width and height must be >= 1")


def require_canonical(pixels: np.ndarray) -> np.ndarray:
    """Return ``pixels`` as a C-contiguous canonical array (no copy when it already is one).

    Only the memory layout is fixed up; anything that would change the values (another dtype,
    grey or alpha channels) is refused, since that is ``decode_image``'s job.
    """
    if not isinstance(pixels, np.ndarray):
        raise ImageError(
            f"pixels: {type(pixels).__name__}; expected a numpy uint8 [H, W, 3] RGB array"
        )
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ImageError(
            f"pixels: array {pixels.dtype}{list(pixels.shape)}; expected uint8 [H, W, 3] RGB"
            " (decode_image converts other inputs)"
        )
    height, width = pixels.shape[:2]
    check_dimensions(width, height, field="pixels")
    return np.ascontiguousarray(pixels)
