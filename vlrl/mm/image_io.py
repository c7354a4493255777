"""Image decoding and encoding at the edge: bytes, arrays or PIL images in, canonical RGB out.

Accepted inputs and how they become canonical RGB ``uint8`` ``[H, W, 3]``:

- encoded bytes in PNG, JPEG or WebP only: few parsers, small attack surface, and every
  screenshot source produces one of them;
- ``uint8`` arrays ``[H, W]`` (grey), ``[H, W, 3]`` (RGB) or ``[H, W, 4]`` (RGBA);
- PIL images in modes RGB, RGBA, L, LA, P, PA and 1 (bilevel maps losslessly to black/white).

Alpha, whether a band, an RGBA palette or a PNG ``tRNS`` transparent colour, is composited onto
white, as a browser shows a transparent page; the blend is PIL's ``paste`` with the alpha mask,
as in vLLM's RGBA-to-RGB conversion (white is its default background too). Modes whose 8-bit RGB would need a choice the data does not pin down are
refused: high bit depth (I, I;16, F: which range maps to 0..255?) and other colour spaces
(CMYK, YCbCr, LAB, HSV: which ICC profile or value range?).

Decompression bombs are refused from the header, before any pixel is decoded: PIL opens lazily,
so the size is checked against ``max_pixels`` and ``MAX_SIDE`` first, and PIL's own
``DecompressionBombWarning``/``DecompressionBombError`` become ``ImageError``. Truncated data is
an error, not a grey tail: decoding forces a full ``load()`` (PIL's global
``ImageFile.LOAD_TRUNCATED_IMAGES`` must stay at its default, False). Only a cut that loses no
pixel (a PNG missing just its final CRC and IEND) still decodes, exactly.
"""

from __future__ import annotations

import io
import struct
import threading
import warnings
import zlib
from typing import Literal

import numpy as np
from PIL import Image

from vlrl.mm.canonical import check_dimensions
from vlrl.mm.errors import ImageError

ImageSource = bytes | bytearray | memoryview | np.ndarray | Image.Image
ImageFormat = Literal["png", "jpeg", "webp"]

DEFAULT_MAX_PIXELS = 40_000_000
"""About 5x a 4K screen: larger inputs are refused unless the caller raises ``max_pixels``."""

MAX_SIDE = 32_768
"""No side may exceed this, whatever ``max_pixels`` allows (a 1-pixel-high strip is no screen)."""

ACCEPTED_FORMATS = ("PNG", "JPEG", "WEBP")
_CONVERTIBLE_MODES = frozenset({"RGB", "RGBA", "L", "LA", "P", "PA", "1"})
_WHITE = (255, 255, 255)
_ENCODE_FORMATS = ("png", "jpeg", "webp")

# What PIL raises on malformed data, beyond its own UnidentifiedImageError (an OSError).
_PIL_DATA_ERRORS = (
    OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error, zlib.error
)

# warnings.catch_warnings swaps the process-wide filter list; this lock keeps concurrent decodes
# on background threads from restoring each other's filters.
_OPEN_LOCK = threading.Lock()


def decode_image(data: ImageSource, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Return ``data`` as canonical RGB ``uint8`` ``[H, W, 3]`` (C-contiguous), or raise ImageError.

    A canonical array is returned as is, without a copy; decoded images come back read-only.
    """
    _check_max_pixels(max_pixels)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return _decode_bytes(data, max_pixels)
    if isinstance(data, np.ndarray):
        return _array_to_rgb(data, max_pixels)
    if isinstance(data, Image.Image):
        return _pil_to_rgb(data, max_pixels)
    raise TypeError(
        f"image: {type(data).__name__}; expected bytes, numpy.ndarray or PIL.Image.Image"
    )


def encode_image(
    pixels: ImageSource,
    format: ImageFormat = "png",
    *,
    quality: int = 90,
    lossless: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> bytes:
    """Encode an image (anything ``decode_image`` accepts, canonicalised first) for shipping.

    ``quality`` applies to jpeg and lossy webp (for lossless webp it is the compression effort);
    ``lossless`` selects lossless webp. PNG is always lossless, JPEG never.
    """
    if format not in _ENCODE_FORMATS:
        raise ValueError(f"format: {format!r}; expected one of {', '.join(_ENCODE_FORMATS)}")
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality: {quality!r}; expected an int in 1..100")
    if lossless and format == "jpeg":
        raise ValueError("lossless: True; jpeg has no lossless mode, use png or webp")
    rgb = decode_image(pixels, max_pixels=max_pixels)
    options = {
        "png": {},
        "jpeg": {"quality": quality},
        "webp": {"quality": quality, "lossless": lossless},
    }[format]
    out = io.BytesIO()
    try:
        Image.fromarray(rgb).save(out, format=format.upper(), **options)
    except _PIL_DATA_ERRORS as e:  # e.g. WebP's 16383-pixel side limit
        height, width = rgb.shape[:2]
        raise ImageError(f"image: cannot encode {width}x{height} pixels as {format} ({e})") from e
    return out.getvalue()


def _check_max_pixels(max_pixels: int) -> None:
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
        raise ValueError(f"max_pixels: {max_pixels!r}; expected an int >= 1")


def _check_size(width: int, height: int, max_pixels: int) -> None:
    check_dimensions(width, height)
    if max(width, height) > MAX_SIDE:
        raise ImageError(f"image: {width}x{height} pixels; each side must be <= {MAX_SIDE}")
    if width * height > max_pixels:
        raise ImageError(
            f"image: {width}x{height} = {width * height} pixels; at most max_pixels={max_pixels}"
            " are accepted (guards against decompression bombs)"
        )


def _sniff_format(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def _decode_bytes(data: bytes | bytearray | memoryview, max_pixels: int) -> np.ndarray:
    if len(data) == 0:
        raise ImageError("image: empty data (0 bytes); expected PNG, JPEG or WebP data")
    head = bytes(data[:12])
    fmt = _sniff_format(head)
    if fmt is None:
        raise ImageError(
            f"image: unsupported or unknown format (data starts with {head!r}); accepted"
            f" formats: {', '.join(ACCEPTED_FORMATS)}"
        )
    with _open_lazily(data, fmt) as image:
        return _pil_to_rgb(image, max_pixels)


def _open_lazily(data: bytes | bytearray | memoryview, fmt: str) -> Image.Image:
    """Parse only the header of ``data`` with the one plugin its magic bytes named."""
    with _OPEN_LOCK, warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            return Image.open(io.BytesIO(data), formats=(fmt,))
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            raise ImageError(
                f"image: possible decompression bomb, refused from its header ({e})"
            ) from None
        except Image.UnidentifiedImageError:
            raise ImageError(
                f"image: corrupt or truncated {fmt} data (cannot identify image file)"
            ) from None
        except _PIL_DATA_ERRORS as e:
            raise ImageError(f"image: corrupt or truncated {fmt} data ({e})") from e


def _array_to_rgb(array: np.ndarray, max_pixels: int) -> np.ndarray:
    if array.dtype != np.uint8:
        raise ImageError(f"image: array dtype {array.dtype}; expected uint8")
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ImageError(
            f"image: array shape {array.shape}; expected (H, W), (H, W, 3) or (H, W, 4)"
        )
    height, width = array.shape[:2]
    _check_size(width, height, max_pixels)
    if array.ndim == 3 and array.shape[2] == 3:
        return np.ascontiguousarray(array)
    return _pil_to_rgb(Image.fromarray(np.ascontiguousarray(array)), max_pixels)


def _pil_to_rgb(image: Image.Image, max_pixels: int) -> np.ndarray:
    if image.mode not in _CONVERTIBLE_MODES:
        raise ImageError(
            f"image: mode {image.mode!r}; expected one of {', '.join(sorted(_CONVERTIBLE_MODES))}"
            " (high bit depth and non-RGB colour spaces are refused)"
        )
    _check_size(*image.size, max_pixels)
    try:
        image.load()  # lazy images decode here; a truncated one must raise, not pad
    except _PIL_DATA_ERRORS as e:
        fmt = image.format or "image"
        raise ImageError(f"image: corrupt or truncated {fmt} data ({e})") from e
    if image.has_transparency_data:
        rgba = image.convert("RGBA")
        rgb = Image.new("RGB", image.size, _WHITE)
        rgb.paste(rgba, mask=rgba.getchannel("A"))
    else:
        rgb = image.convert("RGB") if image.mode != "RGB" else image
    return np.asarray(rgb)
