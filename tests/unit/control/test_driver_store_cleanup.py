"""The driver's clean-up under store errors (issue 51, case 3): a sequence key or image reference
that is no longer there when the driver deletes a group is counted as an incident, the rest of
the group's keys still go, and nothing raises into the control loop."""

from __future__ import annotations

import dataclasses

import numpy as np

from tests.unit.control.test_driver_books import _driver, write_episode
from vlrl.mm import store_image


def _with_image(store, group_id: str, index: int, seed: int):
    meta = write_episode(store, group_id, index)
    pixels = np.random.default_rng(seed).integers(0, 256, (28, 28, 3), dtype=np.uint8)
    image = store_image(store, pixels, holder=meta.key)
    return dataclasses.replace(meta, images=(image,), image_offsets=((0, 0),))


def test_a_store_error_in_clean_up_is_an_incident_and_the_rest_still_goes():
    driver, store = _driver()
    gone, kept = _with_image(store, "click/0", 0, seed=0), _with_image(store, "click/0", 1, seed=1)
    # What another party undid already: one sequence's key and its image reference.
    store.delete([gone.key])
    store.release([(gone.images[0].store_key, gone.key)])
    driver._delete([gone, kept])
    assert driver.book.incidents["delete failed: KeyMissingError"] == 1
    assert driver.book.incidents["release failed: KeyMissingError"] == 1
    assert store.stats().keys == 0  # the other sequence and its image went all the same
