"""Small deterministic images shared by the mm tests."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image


def smooth_rgb(height: int = 24, width: int = 32) -> np.ndarray:
    """A gradient: lossy codecs keep it close, so jpeg/webp can be checked by tolerance."""
    y, x = np.mgrid[0:height, 0:width]
    channels = [x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)]
    return np.stack(channels, axis=-1).astype(np.uint8)


def noise_rgb(height: int = 16, width: int = 16, seed: int = 0) -> np.ndarray:
    """Incompressible pixels: a cut anywhere in the PNG pixel stream loses pixel data."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def pil_bytes(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width x height`` RGB pixels over a few bytes of pixel data.

    Tiny however large the claim: a decoder that trusted the header would allocate it all, and
    one that decoded before checking would fail on the missing data instead of on the size.
    """

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
        + chunk(b"IEND", b"")
    )
