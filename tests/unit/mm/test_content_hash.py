"""content_hash: one identity per canonical pixel content, whatever the image arrived as."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from tests.helpers.images import noise_rgb, pil_bytes
from vlrl.mm import ImageError, content_hash, decode_image, encode_image


def test_golden_value_pins_the_header_and_digest() -> None:
    """Changing the hashed header or the digest length renames every stored image."""
    assert content_hash(np.zeros((2, 3, 3), np.uint8)) == "d872014680a27d90e290da68948ef28e"


def test_is_32_lowercase_hex() -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", content_hash(noise_rgb()))


@pytest.mark.parametrize(
    "arrive_as",
    [
        lambda x: decode_image(pil_bytes(Image.fromarray(x), "PNG")),
        lambda x: decode_image(encode_image(x, "webp", lossless=True)),
        lambda x: decode_image(Image.fromarray(x)),
        lambda x: decode_image(np.dstack([x, np.full(x.shape[:2], 255, np.uint8)])),
        lambda x: x.copy(),
        lambda x: np.asfortranarray(x),
    ],
    ids=["png-bytes", "webp-lossless-bytes", "pil", "opaque-rgba-array", "copy", "fortran-order"],
)
def test_same_pixels_same_hash(arrive_as: object) -> None:
    pixels = noise_rgb(9, 14)
    assert content_hash(arrive_as(pixels)) == content_hash(pixels)


def test_strided_view_hashes_like_its_copy() -> None:
    view = noise_rgb(8, 8)[::2, 1::3]
    assert content_hash(view) == content_hash(np.ascontiguousarray(view))


def test_one_changed_pixel_changes_the_hash() -> None:
    pixels = noise_rgb()
    changed = pixels.copy()
    changed[3, 5, 1] ^= 1
    assert content_hash(changed) != content_hash(pixels)


def test_same_bytes_in_another_shape_change_the_hash() -> None:
    pixels = noise_rgb(2, 6)
    reshaped = pixels.reshape(6, 2, 3)  # identical byte string, transposed size
    assert reshaped.tobytes() == pixels.tobytes()
    assert content_hash(reshaped) != content_hash(pixels)


@pytest.mark.parametrize(
    ("pixels", "message"),
    [
        (np.zeros((4, 4, 3), np.float32), r"pixels: array float32\[4, 4, 3\]; expected uint8"),
        (np.zeros((4, 4), np.uint8), r"pixels: array uint8\[4, 4\]; expected uint8 \[H, W, 3\]"),
        (np.zeros((4, 4, 4), np.uint8), r"pixels: array uint8\[4, 4, 4\]; expected uint8"),
        (np.zeros((0, 4, 3), np.uint8), r"pixels: 4x0 pixels; width and height must be >= 1"),
        ([[[0, 0, 0]]], r"pixels: list; expected a numpy uint8 \[H, W, 3\] RGB array"),
    ],
    ids=["float", "grey", "rgba", "empty", "list"],
)
def test_refuses_non_canonical_input(pixels: object, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        content_hash(pixels)
