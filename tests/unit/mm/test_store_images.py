"""store_image: pixels land in the store once per content, under the content key, held by
reference; delete_sequences drops a sequence's references with it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.helpers.images import noise_rgb
from tests.helpers.records import seq_meta
from vlrl.mm import ImageError, PatchRule, delete_sequences, describe_image, store_image
from vlrl.mm.image_rows import read_images
from vlrl.records import PIXELS
from vlrl.store.local import LocalStore


@pytest.fixture
def store() -> Iterator[LocalStore]:
    store = LocalStore()
    yield store
    store.close()


def _bytes_written(store: LocalStore) -> int:
    return store.io_stats().bytes_written


def _stored_pixels(store: LocalStore, key: str) -> np.ndarray:
    return read_images(store, [key])[key]


def test_stores_pixels_under_the_content_key(store: LocalStore) -> None:
    pixels = noise_rgb(6, 9)
    meta = store_image(store, pixels, holder="seq/a")
    assert meta == describe_image(pixels)
    assert store.contains([meta.store_key]) == [True]
    np.testing.assert_array_equal(_stored_pixels(store, meta.store_key), pixels)


def test_same_content_is_stored_once(store: LocalStore) -> None:
    pixels = noise_rgb(6, 9)
    first = store_image(store, pixels, holder="seq/a")
    written = _bytes_written(store)
    again = store_image(store, pixels.copy(), holder="seq/b")
    assert first == again
    assert 0 < written and _bytes_written(store) == written and store.stats().keys == 2  # the image and its tiles


def test_distinct_content_gets_distinct_keys(store: LocalStore) -> None:
    metas = [store_image(store, noise_rgb(6, 9, seed=seed), holder="seq/a") for seed in range(3)]
    assert len({meta.store_key for meta in metas}) == 3
    assert store.contains([meta.store_key for meta in metas]) == [True] * 3


def test_rule_fills_grid_and_tokens(store: LocalStore) -> None:
    meta = store_image(store, noise_rgb(40, 60), holder="seq/a", rule=PatchRule())
    assert meta.grid_thw == PatchRule().grid(60, 40)
    assert meta.num_tokens == PatchRule().num_tokens(60, 40)


def test_strided_pixels_are_stored_contiguous(store: LocalStore) -> None:
    view = noise_rgb(12, 12)[::2, ::3]
    meta = store_image(store, view, holder="seq/a")
    np.testing.assert_array_equal(_stored_pixels(store, meta.store_key), view)


def test_each_call_is_a_reference_and_the_image_goes_with_the_last_sequence_naming_it(store: LocalStore) -> None:
    pixels = noise_rgb(5, 5)
    image = store_image(store, pixels, holder="seq/0")
    assert store_image(store, pixels.copy(), holder="seq/1") == image
    metas = [seq_meta(f"seq/{i}", 4, images=(image,), image_offsets=((0, 0),)) for i in range(2)]
    for meta in metas:
        store.put(meta.key, {"token_ids": np.arange(4, dtype=np.int32)})
    delete_sequences(store, metas[:1])
    assert store.contains([metas[0].key, image.store_key]) == [False, True]
    delete_sequences(store, metas[1:])
    assert store.stats().keys == 0


@pytest.mark.parametrize(
    "pixels", [np.zeros((4, 4), np.uint8), np.zeros((4, 4, 3), np.float32)], ids=["grey", "float"]
)
def test_non_canonical_pixels_are_refused_before_any_write(
    store: LocalStore, pixels: np.ndarray
) -> None:
    with pytest.raises(ImageError, match=r"^pixels: array .*; expected uint8 \[H, W, 3\] RGB"):
        store_image(store, pixels, holder="seq/a")
    assert _bytes_written(store) == 0


def test_raw_pixels_when_tiles_are_off() -> None:
    store = LocalStore(image_tile_px=None)
    pixels = noise_rgb(6, 9)
    meta = store_image(store, pixels, holder="seq/a")
    assert store.get([meta.store_key], [PIXELS])[meta.store_key][PIXELS].tobytes() == pixels.tobytes()
    assert _bytes_written(store) == pixels.nbytes
