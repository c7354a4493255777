"""decode_image / encode_image: every accepted input becomes canonical RGB; every bad one is
refused with an error naming the problem."""

from __future__ import annotations

import io
import re
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image

from tests.helpers.images import noise_rgb, pil_bytes, png_header_only, smooth_rgb
from vlrl.mm import (
    DEFAULT_MAX_PIXELS,
    MAX_SIDE,
    ImageError,
    content_hash,
    decode_image,
    encode_image,
)


def _assert_canonical(pixels: np.ndarray, height: int, width: int) -> None:
    assert pixels.dtype == np.uint8
    assert pixels.shape == (height, width, 3)
    assert pixels.flags.c_contiguous


def _white_composite(rgba: np.ndarray) -> np.ndarray:
    """``rgb * a + white * (1 - a)`` with ``a`` in [0, 1], in float: the reference blend."""
    rgb, alpha = rgba[..., :3].astype(np.float64), rgba[..., 3:].astype(np.float64) / 255
    return rgb * alpha + 255 * (1 - alpha)


# -- accepted inputs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "options"), [("PNG", {}), ("WEBP", {"lossless": True})], ids=["png", "webp-lossless"]
)
def test_lossless_bytes_decode_exactly(fmt: str, options: dict) -> None:
    pixels = noise_rgb(9, 13)
    decoded = decode_image(pil_bytes(Image.fromarray(pixels), fmt, **options))
    _assert_canonical(decoded, 9, 13)
    np.testing.assert_array_equal(decoded, pixels)


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP"])
def test_lossy_bytes_decode_close(fmt: str) -> None:
    pixels = smooth_rgb()
    decoded = decode_image(pil_bytes(Image.fromarray(pixels), fmt, quality=95))
    _assert_canonical(decoded, *pixels.shape[:2])
    assert np.abs(decoded.astype(int) - pixels).mean() < 3


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_bytes_like_inputs(wrap: type) -> None:
    pixels = noise_rgb(5, 7)
    data = wrap(pil_bytes(Image.fromarray(pixels), "PNG"))
    np.testing.assert_array_equal(decode_image(data), pixels)


def test_canonical_array_is_returned_without_copy() -> None:
    pixels = noise_rgb(4, 6)
    assert decode_image(pixels) is pixels


def test_strided_array_becomes_contiguous() -> None:
    view = noise_rgb(8, 12)[::2, ::3]
    decoded = decode_image(view)
    _assert_canonical(decoded, 4, 4)
    np.testing.assert_array_equal(decoded, view)


def test_grey_array_is_replicated() -> None:
    grey = noise_rgb(5, 6)[..., 0]
    np.testing.assert_array_equal(decode_image(grey), np.repeat(grey[..., None], 3, axis=-1))


def test_rgba_array_is_composited_on_white() -> None:
    rgba = np.random.default_rng(1).integers(0, 256, (6, 7, 4), dtype=np.uint8)
    rgba[0, 0] = (10, 20, 30, 0)  # fully transparent -> white
    rgba[0, 1] = (10, 20, 30, 255)  # opaque -> itself
    decoded = decode_image(rgba)
    _assert_canonical(decoded, 6, 7)
    assert decoded[0, 0].tolist() == [255, 255, 255]
    assert decoded[0, 1].tolist() == [10, 20, 30]
    assert np.abs(decoded - _white_composite(rgba)).max() <= 1


def test_rgba_array_and_rgba_png_agree() -> None:
    rgba = np.random.default_rng(2).integers(0, 256, (5, 5, 4), dtype=np.uint8)
    from_png = decode_image(pil_bytes(Image.fromarray(rgba), "PNG"))
    np.testing.assert_array_equal(from_png, decode_image(rgba))


# Every accepted mode, as a 2x3 image: pixel (0, 1) and (1, 0) are transparent where the mode
# has alpha, and must come out white.
_GREY = np.array([[0, 40, 80], [120, 200, 255]], dtype=np.uint8)
_ALPHA = np.array([[255, 0, 255], [0, 255, 255]], dtype=np.uint8)
_GREY_RGB = np.repeat(_GREY[..., None], 3, axis=-1)
_ON_WHITE = np.where(_ALPHA[..., None] == 0, 255, _GREY_RGB).astype(np.uint8)
_BITS = _GREY > 100


def _palette_image() -> Image.Image:
    image = Image.new("P", (3, 2))
    image.putpalette(_GREY_RGB.reshape(-1).tolist())
    image.putdata(list(range(6)))  # pixel i uses palette entry i
    return image


def _with_alpha(image: Image.Image) -> Image.Image:
    image.putalpha(Image.fromarray(_ALPHA))
    return image


def _png_with_transparent_colour(image: Image.Image, transparency: object) -> Image.Image:
    """Round trip through PNG with a tRNS chunk: the colour ``transparency`` becomes clear."""
    return Image.open(io.BytesIO(pil_bytes(image, "PNG", transparency=transparency)))


_MODE_CASES = {
    "RGB": (lambda: Image.fromarray(_GREY_RGB), _GREY_RGB),
    "RGBA": (lambda: Image.fromarray(np.dstack([_GREY_RGB, _ALPHA])), _ON_WHITE),
    "L": (lambda: Image.fromarray(_GREY), _GREY_RGB),
    "LA": (lambda: Image.merge("LA", [Image.fromarray(_GREY), Image.fromarray(_ALPHA)]), _ON_WHITE),
    "P": (_palette_image, _GREY_RGB),
    "PA": (lambda: _with_alpha(_palette_image().convert("PA")), _ON_WHITE),
    "1": (lambda: Image.fromarray(_BITS), np.repeat(_BITS[..., None] * np.uint8(255), 3, -1)),
    "P+tRNS": (lambda: _png_with_transparent_colour(_palette_image(), 1), None),
    "L+tRNS": (lambda: _png_with_transparent_colour(Image.fromarray(_GREY), 40), None),
    "RGB+tRNS": (
        lambda: _png_with_transparent_colour(Image.fromarray(_GREY_RGB), (40, 40, 40)),
        None,
    ),
}


@pytest.mark.parametrize("case", list(_MODE_CASES))
def test_accepted_modes_become_rgb(case: str) -> None:
    build, expected = _MODE_CASES[case]
    if expected is None:  # tRNS cases: only the grey-40 pixel (0, 1) is transparent
        expected = _GREY_RGB.copy()
        expected[0, 1] = 255
    image = build()
    assert image.mode == case.split("+")[0]
    decoded = decode_image(image)
    _assert_canonical(decoded, 2, 3)
    np.testing.assert_array_equal(decoded, expected)


@pytest.mark.parametrize("case", ["RGB", "RGBA", "L", "LA", "P", "1"])
def test_pil_image_and_its_png_agree(case: str) -> None:
    image = _MODE_CASES[case][0]()
    np.testing.assert_array_equal(decode_image(pil_bytes(image, "PNG")), decode_image(image))


# -- refused inputs --------------------------------------------------------------------------


def test_empty_bytes() -> None:
    with pytest.raises(ImageError, match=r"image: empty data \(0 bytes\)"):
        decode_image(b"")


@pytest.mark.parametrize("fmt", ["GIF", "BMP", "TIFF", "ICO"])
def test_other_formats_are_refused_listing_the_accepted(fmt: str) -> None:
    data = pil_bytes(Image.fromarray(smooth_rgb(8, 8)), fmt)
    accepted = r"unsupported or unknown format .*accepted formats: PNG, JPEG, WEBP"
    with pytest.raises(ImageError, match=accepted):
        decode_image(data)


def test_garbage_bytes() -> None:
    with pytest.raises(ImageError, match=r"starts with b'not an image'.*accepted formats"):
        decode_image(b"not an image at all")


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "PNG"),
        (b"\xff\xd8\xff\xe0" + b"garbage" * 5, "JPEG"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 " + b"garbage" * 5, "WEBP"),
    ],
    ids=["png", "jpeg", "webp"],
)
def test_corrupt_data_behind_a_valid_signature(data: bytes, fmt: str) -> None:
    with pytest.raises(ImageError, match=rf"image: corrupt or truncated {fmt} data \("):
        decode_image(data)


def test_corrupt_png_header_names_the_failure() -> None:
    with pytest.raises(
        ImageError, match=r"^image: corrupt or truncated PNG data \(cannot identify image file\)$"
    ):
        decode_image(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)


@pytest.mark.parametrize(
    ("fmt", "options"), [("PNG", {}), ("JPEG", {}), ("WEBP", {"lossless": True})]
)
def test_truncated_data_is_an_error_not_a_padded_image(fmt: str, options: dict) -> None:
    data = pil_bytes(Image.fromarray(noise_rgb(32, 32)), fmt, **options)
    with pytest.raises(ImageError, match=rf"image: corrupt or truncated {fmt} data"):
        decode_image(data[: len(data) // 2])


def test_png_cut_mid_pixels_reports_truncation() -> None:
    data = pil_bytes(Image.fromarray(noise_rgb(32, 32)), "PNG")
    with pytest.raises(ImageError, match=r"PNG data \(image file is truncated\)"):
        decode_image(data[: len(data) - 30])


def test_png_missing_only_its_trailer_still_has_every_pixel() -> None:
    """A cut through the final CRC and IEND loses no pixel: decoding is exact, so accepted."""
    pixels = noise_rgb(32, 32)
    data = pil_bytes(Image.fromarray(pixels), "PNG")
    np.testing.assert_array_equal(decode_image(data[:-12]), pixels)


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        (np.zeros((720, 0, 3), np.uint8), "0x720"),
        (np.zeros((0, 1280, 3), np.uint8), "1280x0"),
        (np.zeros((0, 0), np.uint8), "0x0"),
        (Image.new("RGB", (0, 720)), "0x720"),
    ],
    ids=["array-w0", "array-h0", "grey-empty", "pil-w0"],
)
def test_zero_size_images(source: object, shown: str) -> None:
    message = rf"^image: {shown} pixels; width and height must be >= 1$"
    with pytest.raises(ImageError, match=message):
        decode_image(source)


def test_zero_size_png_header() -> None:
    with pytest.raises(ImageError, match=r"corrupt or truncated PNG data"):
        decode_image(png_header_only(0, 720))


@pytest.mark.parametrize("dtype", [np.float32, np.uint16, np.int8, bool])
def test_wrong_array_dtype(dtype: type) -> None:
    name = np.dtype(dtype).name
    with pytest.raises(ImageError, match=rf"^image: array dtype {name}; expected uint8$"):
        decode_image(np.zeros((4, 4, 3), dtype))


@pytest.mark.parametrize("shape", [(4,), (4, 4, 1), (4, 4, 2), (4, 4, 5), (1, 4, 4, 3)])
def test_wrong_array_shape(shape: tuple[int, ...]) -> None:
    message = f"image: array shape {shape}; expected (H, W), (H, W, 3) or (H, W, 4)"
    with pytest.raises(ImageError, match=f"^{re.escape(message)}$"):
        decode_image(np.zeros(shape, np.uint8))


def test_wrong_input_type() -> None:
    with pytest.raises(TypeError, match=r"image: list; expected bytes, numpy.ndarray or PIL"):
        decode_image([[0, 0, 0]])


@pytest.mark.parametrize(
    ("make", "mode"),
    [
        (lambda: decode_image(pil_bytes(Image.new("I;16", (4, 4)), "PNG")), "I;16"),
        (lambda: decode_image(Image.new("I", (4, 4))), "I"),
        (lambda: decode_image(pil_bytes(Image.new("CMYK", (4, 4)), "JPEG")), "CMYK"),
        (lambda: decode_image(Image.new("F", (4, 4))), "F"),
        (lambda: decode_image(Image.new("YCbCr", (4, 4))), "YCbCr"),
        (lambda: decode_image(Image.new("LAB", (4, 4))), "LAB"),
        (lambda: decode_image(Image.new("HSV", (4, 4))), "HSV"),
    ],
    ids=["png-I;16", "pil-I", "jpeg-CMYK", "pil-F", "pil-YCbCr", "pil-LAB", "pil-HSV"],
)
def test_modes_without_a_faithful_rgb_are_refused(make: object, mode: str) -> None:
    accepted = "expected one of 1, L, LA, P, PA, RGB, RGBA"
    with pytest.raises(ImageError, match=rf"^image: mode '{re.escape(mode)}'; {accepted}"):
        make()


# -- decompression bombs -----------------------------------------------------------------------

_BOMB = "^image: possible decompression bomb, refused from its header"


@pytest.mark.parametrize(
    ("width", "height", "message"),
    [
        (20_000, 20_000, rf"{_BOMB} \(Image size \(400000000 pixels\) exceeds limit"),
        (10_000, 10_000, rf"{_BOMB} \(Image size \(100000000 pixels\) exceeds limit"),
        (8_000, 8_000, rf"8000x8000 = 64000000 pixels; at most max_pixels={DEFAULT_MAX_PIXELS}"),
        (MAX_SIDE + 1, 1, rf"{MAX_SIDE + 1}x1 pixels; each side must be <= {MAX_SIDE}"),
    ],
    ids=["pil-error", "pil-warning", "max-pixels", "max-side"],
)
def test_bombs_are_refused_from_the_header(width: int, height: int, message: str) -> None:
    """The PNG holds a few bytes of pixels: failing on size, not on missing data, shows the check
    ran on the header before any decoding."""
    with pytest.raises(ImageError, match=message):
        decode_image(png_header_only(width, height))


def test_concurrent_decodes_leave_warning_filters_alone() -> None:
    """Decodes run on background threads; the scoped bomb-warning filter must not leak."""
    before = list(warnings.filters)
    pixels = noise_rgb(8, 8)
    good, bomb = pil_bytes(Image.fromarray(pixels), "PNG"), png_header_only(10_000, 10_000)

    def decode_pair(_: int) -> bool:
        with pytest.raises(ImageError, match="decompression bomb"):
            decode_image(bomb)
        return bool((decode_image(good) == pixels).all())

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(decode_pair, range(200)))
    assert warnings.filters == before


@pytest.mark.parametrize(
    "source",
    [
        lambda: pil_bytes(Image.fromarray(smooth_rgb(10, 10)), "PNG"),
        lambda: smooth_rgb(10, 10),
        lambda: Image.fromarray(smooth_rgb(10, 10)),
        lambda: smooth_rgb(10, 10)[..., 0],
    ],
    ids=["bytes", "array", "pil", "grey-array"],
)
def test_max_pixels_applies_to_every_input(source: object) -> None:
    with pytest.raises(ImageError, match=r"10x10 = 100 pixels; at most max_pixels=99 are accepted"):
        decode_image(source(), max_pixels=99)
    _assert_canonical(decode_image(source(), max_pixels=100), 10, 10)


@pytest.mark.parametrize("max_pixels", [0, -5, 1.5, True])
def test_bad_max_pixels(max_pixels: object) -> None:
    with pytest.raises(ValueError, match=r"^max_pixels: .*; expected an int >= 1$"):
        decode_image(smooth_rgb(), max_pixels=max_pixels)


# -- encode ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "lossless"), [("png", False), ("png", True), ("webp", True)]
)
def test_lossless_encodings_round_trip_exactly(fmt: str, lossless: bool) -> None:
    pixels = noise_rgb(7, 11)
    decoded = decode_image(encode_image(pixels, fmt, lossless=lossless))
    np.testing.assert_array_equal(decoded, pixels)


@pytest.mark.parametrize("fmt", ["jpeg", "webp"])
def test_lossy_encodings_round_trip_close(fmt: str) -> None:
    pixels = smooth_rgb()
    decoded = decode_image(encode_image(pixels, fmt, quality=95))
    assert np.abs(decoded.astype(int) - pixels).mean() < 3


@pytest.mark.parametrize(
    ("fmt", "magic"), [("png", b"\x89PNG"), ("jpeg", b"\xff\xd8\xff"), ("webp", b"RIFF")]
)
def test_encode_writes_the_named_format(fmt: str, magic: bytes) -> None:
    assert encode_image(smooth_rgb(), fmt).startswith(magic)


@pytest.mark.parametrize("shape", [(5, 6, 4), (5, 6)], ids=["rgba", "gray"])
def test_encode_canonicalises_first(shape: tuple[int, ...]) -> None:
    """The bytes hold the canonical RGB image: decoding would canonicalise an RGBA or gray file
    too, so the test opens the file itself and checks its mode."""
    pixels = np.random.default_rng(3).integers(0, 256, shape, dtype=np.uint8)
    with Image.open(io.BytesIO(encode_image(pixels))) as image:
        assert image.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(image), decode_image(pixels))


def test_encode_validates_its_input_like_decode() -> None:
    with pytest.raises(ImageError, match=r"array dtype float32; expected uint8"):
        encode_image(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ImageError, match=r"0x4 pixels"):
        encode_image(np.zeros((4, 0, 3), np.uint8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "gif"}, r"^format: 'gif'; expected one of png, jpeg, webp$"),
        ({"quality": 0}, r"^quality: 0; expected an int in 1..100$"),
        ({"quality": 101}, r"^quality: 101; expected an int in 1..100$"),
        ({"quality": True}, r"^quality: True; expected an int in 1..100$"),
        ({"format": "jpeg", "lossless": True}, r"^lossless: True; jpeg has no lossless mode"),
    ],
)
def test_bad_encode_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode_image(smooth_rgb(), **kwargs)


def test_webp_side_limit_is_an_image_error() -> None:
    with pytest.raises(ImageError, match=r"image: cannot encode 16384x1 pixels as webp"):
        encode_image(np.zeros((1, 16384, 3), np.uint8), "webp")


# -- property ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(arrays(np.uint8, st.tuples(st.integers(1, 12), st.integers(1, 12), st.just(3))))
def test_png_round_trip_keeps_pixels_and_hash(pixels: np.ndarray) -> None:
    decoded = decode_image(encode_image(pixels, "png"))
    np.testing.assert_array_equal(decoded, pixels)
    assert content_hash(decoded) == content_hash(pixels)
    assert content_hash(decode_image(Image.fromarray(pixels))) == content_hash(pixels)
