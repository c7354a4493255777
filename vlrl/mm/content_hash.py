"""The content hash: the identity of an image's pixels, shared by the store key, the delta
tracker and the inference endpoint's cache.

blake3 (fast, cryptographic; vLLM hashes pixels with it too) over a short header naming the
layout, then the canonical RGB bytes. The header keeps a 2x3 image from colliding with a 3x2
image of the same bytes. 128 bits keep accidental collisions out of reach
(~2**64 images for a 50% chance) at half the key length.
"""

from __future__ import annotations

import blake3
import numpy as np

from vlrl.mm.canonical import require_canonical
from vlrl.records import HASH_HEX_CHARS

_HEADER = "vlrl.image.v1 uint8[{height},{width},3]\n"


def content_hash(pixels: np.ndarray) -> str:
    """Return 32 lowercase hex chars identifying canonical RGB ``uint8`` ``[H, W, 3]`` pixels.

    Only the values count: a strided view hashes like its contiguous copy.
    """
    pixels = require_canonical(pixels)
    height, width = pixels.shape[:2]
    hasher = blake3.blake3(_HEADER.format(height=height, width=width).encode("ascii"))
    hasher.update(pixels.data)
    return hasher.hexdigest(length=HASH_HEX_CHARS // 2)
