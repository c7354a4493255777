"""store_image: pixels land in the store once per content, under the content key."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pytest

from tests.mm.images import noise_rgb
from vlrl.mm import ImageError, PatchRule, describe_image, store_image
from vlrl.records import PIXELS
from vlrl.store.errors import DuplicateWriteError
from vlrl.store.local import LocalStore


class FakeStore:
    """The slice of the PayloadStore contract store_image relies on: write-once put, contains."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, np.ndarray]] = {}
        self.puts = 0
        self.bytes_written = 0

    def put(self, key: str, fields: Mapping[str, np.ndarray]) -> None:
        self.puts += 1
        if key in self.rows:
            raise DuplicateWriteError(f"store key {key!r} was already written")
        self.rows[key] = {name: np.array(value) for name, value in fields.items()}
        self.bytes_written += sum(value.nbytes for value in self.rows[key].values())

    def contains(self, keys: Sequence[str]) -> list[bool]:
        return [key in self.rows for key in keys]

    def get(self, keys: Sequence[str], fields: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        return {key: {name: self.rows[key][name] for name in fields} for key in keys}


class RacingStore(FakeStore):
    """A store where another writer always lands between our contains and our put."""

    def contains(self, keys: Sequence[str]) -> list[bool]:
        return [False for _ in keys]


@pytest.fixture(params=["fake", "local"])
def store(request: pytest.FixtureRequest) -> Iterator[FakeStore | LocalStore]:
    store = FakeStore() if request.param == "fake" else LocalStore()
    yield store
    if isinstance(store, LocalStore):
        store.close()


def _bytes_written(store: FakeStore | LocalStore) -> int:
    if isinstance(store, FakeStore):
        return store.bytes_written
    return store.io_stats().bytes_written


def _stored_pixels(store: FakeStore | LocalStore, key: str) -> np.ndarray:
    return store.get([key], [PIXELS])[key][PIXELS]


def test_stores_pixels_under_the_content_key(store: FakeStore | LocalStore) -> None:
    pixels = noise_rgb(6, 9)
    meta = store_image(store, pixels)
    assert meta == describe_image(pixels)
    assert store.contains([meta.store_key]) == [True]
    np.testing.assert_array_equal(_stored_pixels(store, meta.store_key), pixels)


def test_same_content_is_stored_once(store: FakeStore | LocalStore) -> None:
    pixels = noise_rgb(6, 9)
    first = store_image(store, pixels)
    again = store_image(store, pixels.copy())
    assert first == again
    assert _bytes_written(store) == pixels.nbytes


def test_distinct_content_gets_distinct_keys(store: FakeStore | LocalStore) -> None:
    metas = [store_image(store, noise_rgb(6, 9, seed=seed)) for seed in range(3)]
    assert len({meta.store_key for meta in metas}) == 3
    assert store.contains([meta.store_key for meta in metas]) == [True] * 3


def test_rule_fills_grid_and_tokens(store: FakeStore | LocalStore) -> None:
    meta = store_image(store, noise_rgb(40, 60), rule=PatchRule())
    assert meta.grid_thw == PatchRule().grid(60, 40)
    assert meta.num_tokens == PatchRule().num_tokens(60, 40)


def test_strided_pixels_are_stored_contiguous(store: FakeStore | LocalStore) -> None:
    view = noise_rgb(12, 12)[::2, ::3]
    meta = store_image(store, view)
    np.testing.assert_array_equal(_stored_pixels(store, meta.store_key), view)


def test_losing_the_write_race_is_not_an_error() -> None:
    store = RacingStore()
    pixels = noise_rgb(5, 5)
    assert store_image(store, pixels) == store_image(store, pixels)
    assert store.puts == 2
    assert _bytes_written(store) == pixels.nbytes


@pytest.mark.parametrize(
    "pixels", [np.zeros((4, 4), np.uint8), np.zeros((4, 4, 3), np.float32)], ids=["grey", "float"]
)
def test_non_canonical_pixels_are_refused_before_any_write(
    store: FakeStore | LocalStore, pixels: np.ndarray
) -> None:
    with pytest.raises(ImageError, match=r"^pixels: array .*; expected uint8 \[H, W, 3\] RGB"):
        store_image(store, pixels)
    assert _bytes_written(store) == 0
