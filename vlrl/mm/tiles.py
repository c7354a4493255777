"""Screenshots as content-addressed tiles: consecutive GUI screens differ in a few small regions
(a typed character, a hover, a clock), so an image is stored as a *manifest* naming fixed square
tiles, and each distinct tile is stored once, compressed.

A tile is a ``tile x tile`` block of the canonical pixels (cut at the right and bottom edges),
named by the blake3 hash of its shape and bytes. ``TileCodec.split`` gives an image's tiles in
row-major order; tiles are compressed losslessly with zlib at level 1 (GUI pixels are flat
regions and repeated glyphs, which a fast LZ pass shrinks tens of times; ``vlrl bench tiles``
measures it against one PNG per image). A *pack* is the new tiles of one image, concatenated
with their offsets; a manifest names every tile of its image as ``(pack, slot)``, and is itself
compressed (its runs of repeated background tiles compress to almost nothing).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import blake3
import numpy as np

from vlrl.mm.canonical import require_canonical

HASH_BYTES = 16
"""Bytes of a tile hash (128 bits, as the image content hash)."""

ZLIB_LEVEL = 1


def tile_hash(tile: np.ndarray) -> bytes:
    """16 bytes naming a tile's shape and pixels."""
    hasher = blake3.blake3(f"vlrl.tile.v1 {tile.shape[0]}x{tile.shape[1]}\n".encode("ascii"))
    hasher.update(np.ascontiguousarray(tile).data)
    return hasher.digest(length=HASH_BYTES)


@dataclass(frozen=True, slots=True)
class TileCodec:
    """Tiles of side ``tile`` pixels (a multiple of the families' merged patch, 28 or 32 px, keeps
    a changed tile's patches apart from its neighbours'; 64 keeps manifests small)."""

    tile: int = 64

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """Tile rows and columns of an image."""
        return -(-height // self.tile), -(-width // self.tile)

    def split(self, pixels: np.ndarray) -> Iterator[np.ndarray]:
        """The tiles of canonical ``pixels``, row-major (views, not copies)."""
        pixels = require_canonical(pixels)
        height, width = pixels.shape[:2]
        for top in range(0, height, self.tile):
            for left in range(0, width, self.tile):
                yield pixels[top : top + self.tile, left : left + self.tile]

    def shapes(self, height: int, width: int) -> list[tuple[int, int, int]]:
        """``(h, w, 3)`` of each tile of an image, row-major."""
        rows, cols = self.grid(height, width)
        return [
            (min(self.tile, height - r * self.tile), min(self.tile, width - c * self.tile), 3)
            for r in range(rows)
            for c in range(cols)
        ]

    def assemble(self, height: int, width: int, tiles: Sequence[np.ndarray]) -> np.ndarray:
        """The pixels whose row-major tiles are ``tiles``."""
        out = np.empty((height, width, 3), np.uint8)
        _, cols = self.grid(height, width)
        for index, block in enumerate(tiles):
            r, c = divmod(index, cols)
            top, left = r * self.tile, c * self.tile
            out[top : top + block.shape[0], left : left + block.shape[1]] = block
        return out


def pack_tiles(tiles: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """A pack's fields: the compressed tiles end to end (``data``) and where each ends (``ends``)."""
    blobs = [zlib.compress(np.ascontiguousarray(t).data, ZLIB_LEVEL) for t in tiles]
    return {
        "data": np.frombuffer(b"".join(blobs), np.uint8) if blobs else np.zeros(0, np.uint8),
        "ends": np.cumsum([len(b) for b in blobs], dtype=np.int64),
    }


def unpack_tile(pack: dict[str, np.ndarray], slot: int, shape: tuple[int, int, int]) -> np.ndarray:
    """Tile ``slot`` of ``pack``, decompressed to ``shape``."""
    ends = pack["ends"]
    start = int(ends[slot - 1]) if slot else 0
    raw = zlib.decompress(pack["data"][start : int(ends[slot])].tobytes())
    if len(raw) != shape[0] * shape[1] * 3:
        raise ValueError(f"tile {slot} of a pack has {len(raw)} bytes; its image's grid says {shape}")
    return np.frombuffer(raw, np.uint8).reshape(shape)


def encode_manifest(refs: np.ndarray) -> np.ndarray:
    """``int32 [tiles, 2]`` of ``(pack, slot)``, compressed to ``uint8`` bytes."""
    return np.frombuffer(zlib.compress(np.ascontiguousarray(refs, np.int32).data, 6), np.uint8)


def decode_manifest(data: np.ndarray, tiles: int) -> np.ndarray:
    """The ``(pack, slot)`` pairs ``encode_manifest`` compressed, checked against the tile count."""
    refs = np.frombuffer(zlib.decompress(data.tobytes()), np.int32)
    if refs.size != 2 * tiles:
        raise ValueError(f"an image manifest names {refs.size // 2} tiles; its grid has {tiles}")
    return refs.reshape(tiles, 2)
