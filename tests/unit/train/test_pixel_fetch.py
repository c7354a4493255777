"""Lazy pixel fetch: each rank moves exactly the pixels of the images it encodes."""

from __future__ import annotations

import numpy as np
import pytest

from vlrl.mm import store_image
from vlrl.store import LocalStore
from vlrl.store.errors import KeyMissingError
from vlrl.train.encode_plan import plan_encoders
from vlrl.train.pixel_fetch import fetch_pixels


def _stored(store, n):
    from vlrl.mm import PatchRule

    rule = PatchRule(min_pixels=28 * 28, max_pixels=112 * 112)
    return [store_image(store, np.full((40 + 8 * i, 60 + 4 * i, 3), i, np.uint8), holder="workload", rule=rule) for i in range(n)]


def test_each_rank_reads_only_its_own_images():
    writer = LocalStore(image_tile_px=None)  # raw rows: bytes moved are the images' own sizes
    metas = _stored(writer, 12)
    plan = plan_encoders(metas + metas[:3], world_size=4)  # repeats are encoded once
    total = 0
    for rank in range(4):
        before = writer.io_stats().bytes_read
        mine = [plan.hashes[i] for i in plan.items_of(rank)]
        pixels = fetch_pixels(writer, mine, rank=rank)
        moved = writer.io_stats().bytes_read - before
        expected = [m for m in metas if m.content_hash in mine]
        assert moved == sum(m.nbytes for m in expected)
        assert [p.shape[:2] for p in pixels] == [(m.height, m.width) for m in sorted(expected, key=lambda m: mine.index(m.content_hash))]
        total += moved
    assert total == sum(m.nbytes for m in metas)  # every distinct image crossed once, to one rank


def test_missing_pixels_are_named():
    store = LocalStore()
    metas = _stored(store, 2)
    store.delete([metas[1].store_key])
    with pytest.raises(KeyMissingError, match=rf"rank 0: pixels of image\(s\) \['{metas[1].content_hash}'\]"):
        fetch_pixels(store, [m.content_hash for m in metas], rank=0)


def test_tiled_images_come_back_exact_and_each_stored_byte_crosses_once():
    writer = LocalStore()  # tiles, the default
    metas = _stored(writer, 12)
    plan = plan_encoders(metas, world_size=4)
    total = 0
    for rank in range(4):
        before = writer.io_stats().bytes_read
        mine = [plan.hashes[i] for i in plan.items_of(rank)]
        pixels = fetch_pixels(writer, mine, rank=rank)
        total += writer.io_stats().bytes_read - before
        for digest, got in zip(mine, pixels):
            i = next(k for k, m in enumerate(metas) if m.content_hash == digest)
            np.testing.assert_array_equal(got, np.full((40 + 8 * i, 60 + 4 * i, 3), i, np.uint8))
    assert total == writer.stats().bytes  # manifests and packs, each read by one rank only
