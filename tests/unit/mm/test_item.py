"""MMItemMeta: a small, validated record that names an image without holding it."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from tests.helpers.images import noise_rgb
from vlrl.mm import PatchRule, content_hash, describe_image
from vlrl.records import MMItemMeta, image_store_key

HASH = "0123456789abcdef0123456789abcdef"


def _meta(**overrides: object) -> MMItemMeta:
    fields = {"content_hash": HASH, "width": 4, "height": 2, "nbytes": 24, "store_key": "img/x"}
    return MMItemMeta(**{**fields, **overrides})


def test_describe_image() -> None:
    pixels = noise_rgb(5, 7)
    meta = describe_image(pixels)
    assert meta.content_hash == content_hash(pixels)
    assert (meta.width, meta.height, meta.nbytes) == (7, 5, 7 * 5 * 3)
    assert meta.store_key == f"img/{meta.content_hash}" == image_store_key(meta.content_hash)
    assert meta.grid_thw is None and meta.num_tokens is None


@pytest.mark.parametrize("rule", [PatchRule(), PatchRule(min_pixels=28 * 28 * 16)])
def test_patch_rule_fills_grid_and_tokens(rule: PatchRule) -> None:
    plain = describe_image(noise_rgb(30, 50))
    meta = plain.with_patch_rule(rule)
    assert meta.grid_thw == rule.grid(50, 30)
    assert meta.num_tokens == rule.num_tokens(50, 30)
    assert describe_image(noise_rgb(30, 50), rule=rule) == meta
    assert plain.grid_thw is None  # a new record; the old one is unchanged


def test_is_a_small_frozen_record_without_arrays() -> None:
    meta = describe_image(noise_rgb(64, 64), rule=PatchRule())
    assert not any(isinstance(getattr(meta, f.name), np.ndarray) for f in dataclasses.fields(meta))
    assert len(pickle.dumps(meta)) < 400
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.width = 3  # type: ignore[misc]
    assert not hasattr(meta, "__dict__")


_HEX = "expected 32 lowercase hex chars"
_POSITIVE = "expected an int >= 1"
_BOTH = "expected both or neither"
_GRID = r"expected \(t, h, w\), ints >= 1"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"content_hash": HASH.upper()}, rf"^MMItemMeta.content_hash: '{HASH.upper()}'; {_HEX}$"),
        ({"content_hash": HASH[:-1]}, rf"^MMItemMeta.content_hash: '{HASH[:-1]}'; {_HEX}$"),
        ({"content_hash": None}, rf"^MMItemMeta.content_hash: None; {_HEX}$"),
        ({"width": 0, "nbytes": 0}, rf"^MMItemMeta.width: 0; {_POSITIVE}$"),
        ({"height": -2}, rf"^MMItemMeta.height: -2; {_POSITIVE}$"),
        ({"width": True}, rf"^MMItemMeta.width: True; {_POSITIVE}$"),
        ({"nbytes": 8.0}, rf"^MMItemMeta.nbytes: 8.0; {_POSITIVE}$"),
        ({"nbytes": 8}, r"^MMItemMeta.nbytes: 8; expected width \* height \* 3 = 24$"),
        ({"store_key": ""}, r"^MMItemMeta.store_key: ''; expected a non-empty str$"),
        ({"grid_thw": (1, 2, 2)}, rf"^MMItemMeta.grid_thw: \(1, 2, 2\), num_tokens: None; {_BOTH}"),
        ({"num_tokens": 1}, rf"^MMItemMeta.grid_thw: None, num_tokens: 1; {_BOTH}$"),
        ({"grid_thw": [1, 2, 2], "num_tokens": 1}, rf"^MMItemMeta.grid_thw: \[1, 2, 2\]; {_GRID}$"),
        ({"grid_thw": (1, 2), "num_tokens": 1}, rf"^MMItemMeta.grid_thw: \(1, 2\); {_GRID}$"),
        ({"grid_thw": (1, 0, 2), "num_tokens": 1}, rf"^MMItemMeta.grid_thw: \(1, 0, 2\); {_GRID}$"),
        ({"grid_thw": (1, 2, 2), "num_tokens": 0}, rf"^MMItemMeta.num_tokens: 0; {_POSITIVE}$"),
    ],
)
def test_bad_fields_are_named(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _meta(**overrides)


def test_valid_record_with_grid() -> None:
    meta = _meta(grid_thw=(1, 2, 2), num_tokens=1)
    assert meta.num_tokens == 1


@pytest.mark.parametrize("bad", ["", "img/abc", HASH.upper(), 123])
def test_image_store_key_needs_a_content_hash(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^content_hash: .*; expected 32 lowercase hex chars$"):
        image_store_key(bad)  # type: ignore[arg-type]
