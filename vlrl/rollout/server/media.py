"""Images of a chat request: decoded (off the event loop) to canonical pixels, or found by uuid.

A request's images pass four steps; each refuses with a 400 that names the part and the limit:

1. at most ``max_images`` image parts, sent or referenced;
2. one source per image: parts that share a ``uuid`` (vLLM's identity of an image) take the
   first one's bytes, parts that share a URL are fetched or base64-decoded once;
3. the size of every distinct image is read from its header, before any pixel is decoded: its
   aspect ratio must suit the patch rule (the processor refuses the same strips), and the
   distinct images together may hold at most ``max_request_pixels``;
4. each distinct image is decoded once, under the per-image ``max_pixels`` (decompression bombs
   are refused from the header), however many parts carry it.

An image sent with bytes and a ``uuid`` is remembered as ``uuid -> (content hash, size)``: a
later ``"image_url": null`` part with that uuid is served from the engine's image cache, keyed
by content hash. The uuid table is a bounded LRU of small records; the pixels live only in the
engine cache, whose eviction is what a client normally sees as a miss.

Remote ``http(s)`` URLs are fetched only from hosts on an allowlist (empty by default), without
redirects, under a timeout and the request size limit: a server that fetched any URL would let
its clients probe the network behind it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import numpy as np
from PIL import Image

from vlrl.mm import ACCEPTED_FORMATS, ImageError, PatchRule, content_hash, decode_image
from vlrl.rollout.protocol import ImagePart
from vlrl.rollout.server.wire import ApiError, ImageInput

_FETCH_TIMEOUT_S = 10.0


@dataclass(slots=True)
class MediaStats:
    images_received: int = 0
    """Image parts that came with bytes (data URL or fetched)."""
    image_bytes_received: int = 0
    """Encoded bytes of those parts (after base64 decoding)."""
    images_decoded: int = 0
    """Distinct images decoded: identical parts of one request decode once."""
    images_referenced: int = 0
    """Images sent as a bare uuid reference."""
    remote_images_fetched: int = 0


@dataclass(frozen=True, slots=True)
class _Known:
    content_hash: str
    width: int
    height: int


class ImageResolver:
    def __init__(
        self,
        *,
        rule: PatchRule,
        max_images: int,
        max_pixels: int,
        max_request_pixels: int,
        max_bytes: int,
        remote_hosts: Sequence[str],
        max_uuids: int,
    ) -> None:
        self._rule = rule
        self._max_images = max_images
        self._max_pixels = max_pixels
        self._max_request_pixels = max_request_pixels
        self._max_bytes = max_bytes
        self._remote_hosts = frozenset(host.lower() for host in remote_hosts)
        self._max_uuids = max_uuids
        self._known: OrderedDict[str, _Known] = OrderedDict()
        self._session: aiohttp.ClientSession | None = None
        self.stats = MediaStats()

    async def resolve(
        self, images: Sequence[ImageInput], *, unknown_as_hash: bool
    ) -> tuple[list[ImagePart | None], list[int]]:
        """The request's images in order, and the indices of references this server cannot place.

        With ``unknown_as_hash`` (token-in requests, whose prompts need no image size) a uuid not in
        the table is looked up in the engine's cache as a content hash (vlrl's clients send content
        hashes as uuids), so the engine still caches this request's other images when it reports
        the miss, and the client's resend carries only the missing ones. Otherwise an unknown uuid
        is missing, and its part is None.
        """
        if len(images) > self._max_images:
            raise ApiError(
                f"messages: {len(images)} images; at most {self._max_images} per request are accepted"
                " (the server's --max-images)",
                param="messages",
            )
        sent = [i for i, image in enumerate(images) if image.url is not None]
        decoded = await self._decode_sent([images[i] for i in sent])
        parts: list[ImagePart | None] = [None] * len(images)
        for i, part in zip(sent, decoded):
            parts[i] = part
            if images[i].uuid is not None:
                self._remember(images[i].uuid, _Known(part.content_hash, part.width, part.height))
        missing = []
        for i, image in enumerate(images):
            if image.url is None:
                self.stats.images_referenced += 1
                known = self._known.get(image.uuid)
                if known is None and unknown_as_hash:
                    parts[i] = ImagePart(image.uuid, 0, 0)  # size unknown, and not needed
                elif known is None:
                    missing.append(i)
                else:
                    self._known.move_to_end(image.uuid)
                    parts[i] = ImagePart(known.content_hash, known.width, known.height)
        return parts, missing

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _remember(self, uuid: str, known: _Known) -> None:
        self._known[uuid] = known
        self._known.move_to_end(uuid)
        while len(self._known) > self._max_uuids:
            self._known.popitem(last=False)

    async def _decode_sent(self, images: list[ImageInput]) -> list[ImagePart]:
        """One part per image sent with bytes (steps 2 to 4 of the module docstring)."""
        keys = [("uuid", image.uuid) if image.uuid is not None else ("url", image.url) for image in images]
        first: dict[tuple[str, str], ImageInput] = {}
        for key, image in zip(keys, images):
            first.setdefault(key, image)
        data_of = dict(zip(first, await asyncio.gather(*(self._bytes(image) for image in first.values()))))
        distinct: dict[bytes, ImageInput] = {}
        for key, image in first.items():
            distinct.setdefault(data_of[key], image)
        sizes = await asyncio.gather(*(asyncio.to_thread(_header_size, data) for data in distinct))
        self._check_sizes(list(distinct.values()), sizes)
        decoded = await asyncio.gather(*(self._decode(data, image) for data, image in distinct.items()))
        part_of = dict(zip(distinct, decoded))
        self.stats.images_decoded += len(distinct)
        self.stats.images_received += len(images)
        self.stats.image_bytes_received += sum(len(data_of[key]) for key in keys)
        return [part_of[data_of[key]] for key in keys]

    def _check_sizes(self, images: list[ImageInput], sizes: list[tuple[int, int] | None]) -> None:
        """Each image's aspect ratio, and the request's pixels in all, from the headers."""
        total = 0
        for image, size in zip(images, sizes):
            if size is None:  # no header PIL can read: decode_image says what is wrong
                continue
            width, height = size
            try:
                self._rule.num_tokens(width, height)
            except ImageError as error:
                where = f"{image.where}.image_url.url"
                raise ApiError(f"{where}: {error}", param=where) from None
            if width * height <= self._max_pixels:  # larger ones decode_image refuses, from their header
                total += width * height
        if total > self._max_request_pixels:
            raise ApiError(
                f"messages: the request's distinct images hold {total} pixels; at most"
                f" {self._max_request_pixels} per request are decoded (the server's --max-request-pixels)",
                param="messages",
            )

    async def _bytes(self, image: ImageInput) -> bytes:
        where = f"{image.where}.image_url.url"
        if image.url.startswith("data:"):
            return await asyncio.to_thread(_data_url_bytes, image.url, where)
        return await self._fetch(image.url, where)

    async def _decode(self, data: bytes, image: ImageInput) -> ImagePart:
        try:
            pixels, key = await asyncio.to_thread(_canonical, data, self._max_pixels)
        except ImageError as error:
            where = f"{image.where}.image_url.url"
            raise ApiError(f"{where}: {error}", param=where) from None
        return ImagePart(key, int(pixels.shape[1]), int(pixels.shape[0]), pixels)

    async def _fetch(self, url: str, where: str) -> bytes:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ApiError(
                f"{where}: URL scheme {parts.scheme!r}; expected a data: URL (or http(s) from an allowed host)",
                param=where,
            )
        host = (parts.hostname or "").lower()
        if host not in self._remote_hosts:
            raise ApiError(
                f"{where}: remote image URLs are refused (host {host!r} is not allowed); send the image as"
                " a data: URL, or start the server with --allow-remote-images HOST",
                param=where,
            )
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_FETCH_TIMEOUT_S))
        try:
            async with self._session.get(url, allow_redirects=False) as response:
                if response.status != 200:
                    raise ApiError(f"{where}: fetching {url} answered HTTP {response.status}", param=where)
                data = bytearray()
                async for chunk in response.content.iter_chunked(1 << 16):
                    data += chunk
                    if len(data) > self._max_bytes:
                        raise ApiError(f"{where}: {url} is larger than {self._max_bytes} bytes", param=where)
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            raise ApiError(f"{where}: could not fetch {url} ({type(error).__name__})", param=where) from None
        self.stats.remote_images_fetched += 1
        return bytes(data)


def _data_url_bytes(url: str, where: str) -> bytes:
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        raise ApiError(f"{where}: expected a base64 data URL, data:image/png;base64,...", param=where)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(f"{where}: the data URL's payload is not valid base64", param=where) from None


def _header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header alone (PIL opens lazily), or None where it reads none."""
    try:
        with Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS) as image:
            return image.size
    except Exception:  # anything PIL raises on a bad header; decode_image reports it precisely
        return None


def _canonical(data: bytes, max_pixels: int) -> tuple[np.ndarray, str]:
    pixels = decode_image(data, max_pixels=max_pixels)
    return pixels, content_hash(pixels)
