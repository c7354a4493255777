"""Screenshots shipped between processes as tiles: only the tiles the receiver lacks travel.

A ``TileSender`` serves one receiver for one stream of images (an env host's harness lease to its
Agent Loop; an inference client's trajectory to its replica). It remembers the tiles it shipped
and the tile grid of each image it shipped, and finds a new image's changed tiles by comparing its
pixels with the base's, so only those are hashed. A new image travels as a ``TiledImage``: its size,
the grid positions whose tile differs from a *base* (the sender's latest image of the same size,
which the receiver holds), the tile hashes at those positions, and the compressed pixels of only
the tiles this receiver was never sent. So a typed character costs one or two tiles, not a
screen. A ``TileReceiver`` keeps tiles by hash and grids by image, both bounded; when it lacks the
base or a tile, ``assemble`` answers None (a miss): the sender starts over (``reset``) and the
image goes again whole. Tiles are the store's (``mm.tiles``: 64 px, blake3 names, zlib level 1).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from vlrl.mm.canonical import require_canonical
from vlrl.mm.tiles import HASH_BYTES, TileCodec, pack_tiles, tile_hash, unpack_tile


@dataclass(frozen=True, slots=True)
class TiledImage:
    """One image as the tiles its receiver lacks, against a base image it holds."""

    key: str
    """The image's name between sender and receiver (its content hash)."""
    height: int
    width: int
    tile: int
    base: str | None
    """An image of the same size the receiver holds; None: every position is listed."""
    changed: np.ndarray
    """int32 grid positions (row-major) whose tile differs from the base's."""
    hashes: np.ndarray
    """uint8 ``[len(changed), 16]``: the tile hash at each changed position."""
    carried: np.ndarray
    """int32 indices into ``changed`` of the tiles whose pixels travel, each hash once."""
    data: np.ndarray
    """uint8: the carried tiles compressed, end to end."""
    ends: np.ndarray
    """int64: where each carried tile's bytes end in ``data``."""

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays: what it costs on a wire, besides a few hundred of framing."""
        return sum(a.nbytes for a in (self.changed, self.hashes, self.carried, self.data, self.ends))


def tile_grid(codec: TileCodec, pixels: np.ndarray) -> np.ndarray:
    """uint8 ``[tiles, 16]``: the hash of each tile of ``pixels``, row-major."""
    return np.frombuffer(b"".join(tile_hash(t) for t in codec.split(pixels)), np.uint8).reshape(-1, HASH_BYTES)


class TileSender:
    """What one receiver holds of this stream: the tiles shipped and the grids of the images shipped.

    It keeps the pixels of its latest image of each size (no copy), and finds the tiles of a new
    image that differ from that base by comparing pixels, hashing only those: the caller must not
    write into an image it gave ``encode`` (an image drawn into the base's own memory is caught,
    and compared by hashing every tile)."""

    def __init__(self, tile: int = 64) -> None:
        self._codec = TileCodec(tile)
        self.reset()

    def reset(self) -> None:
        """The receiver holds nothing of this stream (it missed, or it is a new one)."""
        self._sent: set[bytes] = set()
        self._grids: dict[str, np.ndarray] = {}
        self._latest: dict[tuple[int, int], tuple[str, np.ndarray]] = {}  # size -> newest image: key, pixels

    def fork(self) -> TileSender:
        """A sender for another stream to the same receiver that holds what this one sent (a
        branch that starts where its root is); the two go on independently."""
        twin = TileSender(self._codec.tile)
        twin._sent, twin._grids, twin._latest = set(self._sent), dict(self._grids), dict(self._latest)
        return twin

    def encode(self, key: str, pixels: np.ndarray) -> TiledImage:
        """``pixels`` (named ``key``) as the tiles the receiver lacks; the receiver is then assumed
        to hold them (a miss says otherwise)."""
        pixels = require_canonical(pixels)
        height, width = pixels.shape[:2]
        base = self._latest.get((height, width))
        if base is None:
            grid = tile_grid(self._codec, pixels)
            changed = np.arange(len(grid), dtype=np.int32)
        else:
            base_grid = self._grids[base[0]]
            if np.may_share_memory(pixels, base[1]):  # drawn over the base: only hashes tell what changed
                grid = tile_grid(self._codec, pixels)
                changed = np.flatnonzero((grid != base_grid).any(axis=1)).astype(np.int32)
            else:
                changed = self._codec.changed(base[1], pixels)
                grid = base_grid.copy()
                for position in changed.tolist():
                    grid[position] = np.frombuffer(tile_hash(self._codec.at(pixels, position)), np.uint8)
        carried, fresh = [], []
        for index, position in enumerate(changed.tolist()):
            digest = grid[position].tobytes()
            if digest not in self._sent:
                self._sent.add(digest)
                carried.append(index)
                fresh.append(self._codec.at(pixels, position))
        pack = pack_tiles(fresh)
        self._grids[key] = grid
        self._latest[(height, width)] = (key, pixels)
        return TiledImage(
            key, height, width, self._codec.tile, None if base is None else base[0], changed, grid[changed],
            np.array(carried, np.int32), pack["data"], pack["ends"],
        )  # fmt: skip


class TileReceiver:
    """Tiles by hash, the grids of the latest ``max_images`` images, and the pixels of the latest
    ``max_bases`` images that take at most half of ``max_bytes`` (tiles and pixels held stay within
    it: the least recently used tiles are dropped). A ``TiledImage`` whose base's pixels it holds
    is assembled by copying them and writing the changed tiles over them; else tile by tile.
    Assembled pixels are read-only (they may be the next image's base). Safe to share between
    threads (a replica assembles requests on several)."""

    def __init__(self, max_bytes: int, max_images: int = 4096, max_bases: int = 1) -> None:
        self._max_bytes, self._max_images, self._max_bases = max_bytes, max_images, max_bases
        self._lock = threading.Lock()
        self._tiles: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._grids: OrderedDict[str, np.ndarray] = OrderedDict()
        self._bases: OrderedDict[str, np.ndarray] = OrderedDict()
        self.nbytes = 0

    def assemble(self, image: TiledImage) -> np.ndarray | None:
        """The exact pixels of ``image``, or None when its base or one of its tiles is not held."""
        with self._lock:
            return self._assemble(image)

    def _assemble(self, image: TiledImage) -> np.ndarray | None:
        codec = TileCodec(image.tile)
        shapes = codec.shapes(image.height, image.width)
        if image.base is None:
            grid = np.empty((len(shapes), HASH_BYTES), np.uint8)
        else:
            base = self._grids.get(image.base)
            if base is None or len(base) != len(shapes):
                return None
            grid = base.copy()
        grid[image.changed] = image.hashes
        pack = {"data": image.data, "ends": image.ends}
        arrived = {
            image.hashes[index].tobytes(): unpack_tile(pack, slot, shapes[image.changed[index]])
            for slot, index in enumerate(image.carried.tolist())
        }
        base_pixels = self._bases.get(image.base) if image.base is not None else None
        if base_pixels is None:
            pixels = self._tile_by_tile(codec, image, grid, arrived)
        else:
            pixels = self._over_base(codec, image, base_pixels, arrived)
        if pixels is None:
            return None
        for digest, block in arrived.items():
            self._keep(digest, block)
        self._grids[image.key] = grid
        self._grids.move_to_end(image.key)
        while len(self._grids) > self._max_images:
            self._grids.popitem(last=False)
        pixels.setflags(write=False)
        self._hold_base(image.key, pixels)
        return pixels

    def _tile_by_tile(
        self, codec: TileCodec, image: TiledImage, grid: np.ndarray, arrived: dict[bytes, np.ndarray]
    ) -> np.ndarray | None:
        blocks = []
        for row in grid:
            block = self._block(row.tobytes(), arrived)
            if block is None:
                return None
            blocks.append(block)
        return codec.assemble(image.height, image.width, blocks)

    def _over_base(
        self, codec: TileCodec, image: TiledImage, base: np.ndarray, arrived: dict[bytes, np.ndarray]
    ) -> np.ndarray | None:
        pixels = base.copy()
        for index, position in enumerate(image.changed.tolist()):
            block = self._block(image.hashes[index].tobytes(), arrived)
            if block is None:
                return None
            codec.at(pixels, position)[...] = block
        return pixels

    def _block(self, digest: bytes, arrived: dict[bytes, np.ndarray]) -> np.ndarray | None:
        """The tile named ``digest``: arrived with the image, or held (then it is used recently)."""
        block = arrived.get(digest)
        if block is None:
            block = self._tiles.get(digest)
            if block is not None:
                self._tiles.move_to_end(digest)
        return block

    def _keep(self, digest: bytes, block: np.ndarray) -> None:
        if digest in self._tiles:
            self._tiles.move_to_end(digest)
            return
        self._tiles[digest] = block
        self.nbytes += block.nbytes
        self._drop_tiles()

    def _hold_base(self, key: str, pixels: np.ndarray) -> None:
        if pixels.nbytes > self._max_bytes // 2 or self._max_bases == 0:
            return
        while len(self._bases) >= self._max_bases:
            self.nbytes -= self._bases.popitem(last=False)[1].nbytes
        self._bases[key] = pixels
        self.nbytes += pixels.nbytes
        self._drop_tiles()

    def _drop_tiles(self) -> None:
        """Drop the least recently used tiles past ``max_bytes`` (the newest always stays)."""
        while self.nbytes > self._max_bytes and len(self._tiles) > 1:
            _, dropped = self._tiles.popitem(last=False)
            self.nbytes -= dropped.nbytes
