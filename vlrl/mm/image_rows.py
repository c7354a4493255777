"""How screenshots sit in the payload store: whole raw pixels, or content-addressed tiles.

With tiles (the store's ``image_tile_px``, on by default), an image key holds a manifest: its
size, the tile side, the *packs* its tiles are in and each tile's ``(pack, slot)``. A pack is the
tiles an image introduced, compressed (``mm.tiles``), under a key named by those tiles' hashes in
slot order: which tiles an image introduces depends on what its writer wrote before, so two
writers of one image may make different packs of it, and a pack key names one content only. An
``ImageWriter`` writes one writer's images (a trajectory's, in turn order) and remembers their
tiles, so a later screen stores only the tiles that changed and names the earlier packs for the
rest. An image key holds one reference to each of its packs (``put_shared(..., holds=...)``),
taken for it (``held_for``) under a holder name unique to that write, so a pack lives while any
image naming it does and goes with the last. An image is reserved only once every pack it names
is written: a pack another writer is still writing is waited for, and written again if that
write fails (``put_shared``, ``share(..., settle=True)``; ``docs/store.md``), so a reader never
finds an image whose pack failed; a dead writer's ``take_back`` leaves the packs of
an image it wrote that others still hold, and the images a restarted index shard lost drop
theirs. The image's content hash, key and ``MMItemMeta`` are the same either way;
``read_images`` gives back the exact pixels.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import blake3
import numpy as np

from vlrl.mm.tiles import HASH_BYTES, TileCodec, decode_manifest, encode_manifest, pack_tiles, tile_hash, unpack_tile
from vlrl.records import PIXELS, MMItemMeta
from vlrl.store.errors import KeyMissingError, ShardLostError

MANIFEST, PACKS, GEOMETRY = "tile_manifest", "tile_packs", "tile_geometry"
"""Fields of a tiled image key: the compressed ``(pack, slot)`` pairs, the pack keys (ASCII, one
row each) and ``(height, width, tile)``."""

PACK_PREFIX = "tiles/"


def pack_key(tile_hashes: Sequence[bytes]) -> str:
    """The key of the pack of the tiles ``tile_hashes``, in slot order."""
    return PACK_PREFIX + blake3.blake3(b"".join(tile_hashes)).hexdigest(length=HASH_BYTES)


class ImageWriter:
    """Writes images to ``store`` as its ``image_tile_px`` says, remembering the tiles it wrote."""

    def __init__(self, store: Any) -> None:
        tile = getattr(store, "image_tile_px", None)
        self._codec = TileCodec(tile) if tile else None
        self._known: dict[bytes, tuple[str, int]] = {}  # tile hash -> (pack key, slot)

    def put(self, store: Any, meta: MMItemMeta, pixels: np.ndarray, *, holder: str, writer: str | None = None) -> bool:
        """One reference for ``holder`` to the image ``meta`` (written if absent); True when written."""
        if self._codec is None:
            return store.put_shared(meta.store_key, {PIXELS: pixels}, holder=holder, writer=writer)
        if store.share([meta.store_key], holder, writer=writer, settle=True)[0]:
            return False
        tiles = list(self._codec.split(pixels))
        hashes = [tile_hash(t) for t in tiles]
        fresh: dict[bytes, np.ndarray] = {}  # new tiles, in slot order
        for digest, tile in zip(hashes, tiles):
            if digest not in self._known:
                fresh.setdefault(digest, tile)
        key, own = meta.store_key, pack_key(list(fresh))
        slots = {digest: slot for slot, digest in enumerate(fresh)}
        places = [self._known.get(d) or (own, slots[d]) for d in hashes]
        packs = list(dict.fromkeys(pack for pack, _ in places))
        refs = np.array([(packs.index(pack), slot) for pack, slot in places], np.int32)
        token = f"{key}#{uuid.uuid4().hex[:16]}"  # this write's holder name on its packs
        taken: list[str] = []
        try:
            if fresh:
                store.put_shared(own, pack_tiles(list(fresh.values())), holder=token, writer=writer, held_for=key)
                taken.append(own)
            earlier = [p for p in packs if p != own]
            held = store.share(earlier, token, writer=writer, held_for=key, settle=True) if earlier else []
            taken += [p for p, ok in zip(earlier, held) if ok]
            if not all(held):
                lost = [p for p, ok in zip(earlier, held) if not ok]
                raise KeyMissingError(f"image {key!r}: tile pack(s) {lost[:3]} of this writer's earlier screens are gone")
            fields = {
                MANIFEST: encode_manifest(refs),
                PACKS: np.array([list(p.encode("ascii")) for p in packs], np.uint8),
                GEOMETRY: np.array([*pixels.shape[:2], self._codec.tile], np.int32),
            }
            wrote = store.put_shared(key, fields, holder=holder, writer=writer, holds=packs, holds_as=token)
        except BaseException:
            store.release_held([(p, token) for p in taken])
            raise
        if not wrote:  # another writer stored this image meanwhile, with its own packs
            store.release_held([(p, token) for p in taken])
            return False  # the pack this wrote may be gone with those references: not known
        if not all(store.holds([(p, token) for p in packs])):
            # The image's shard restarted while this wrote: the store dropped the references held
            # for it, so the image must not stay naming packs it does not hold.
            store.release([(key, holder)])
            raise ShardLostError(f"image {key!r}: its index shard restarted while it was written")
        self._known.update({d: (own, slot) for d, slot in slots.items()})
        return True


def read_images(store: Any, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """The exact pixels of the image keys ``keys``, however each was stored; every pack is read
    once per call, however many of the images name it."""
    keys = list(dict.fromkeys(keys))
    rows = store.get(keys) if keys else {}
    tiled = {key: row for key, row in rows.items() if MANIFEST in row}
    names = {key: [bytes(r).decode("ascii") for r in row[PACKS]] for key, row in tiled.items()}
    wanted = sorted({name for packs in names.values() for name in packs})
    packs = store.get(wanted) if wanted else {}
    out = {}
    for key in keys:
        row = rows[key]
        if key not in tiled:
            out[key] = row[PIXELS]
            continue
        height, width, tile = (int(v) for v in row[GEOMETRY])
        codec = TileCodec(tile)
        shapes = codec.shapes(height, width)
        refs = decode_manifest(row[MANIFEST], len(shapes))
        own = names[key]
        decoded: dict[tuple[int, int, tuple[int, int, int]], np.ndarray] = {}  # a repeated tile is decoded once
        blocks = []
        for (p, s), shape in zip(refs.tolist(), shapes):
            tile = decoded.get((p, s, shape))
            if tile is None:
                tile = decoded[(p, s, shape)] = unpack_tile(packs[own[p]], s, shape)
            blocks.append(tile)
        out[key] = codec.assemble(height, width, blocks)
    return out
