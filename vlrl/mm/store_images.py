"""Image pixels in the payload store: written once per distinct content, held by reference.

The key is the content hash (``image_store_key``), so an image seen in many turns, trajectories
or groups is stored once and every ``MMItemMeta`` that names it points at the same row. Each
sequence that names an image holds one reference to its key (``store_image`` takes it, through
the store's ``put_shared``), and ``delete_sequences`` drops the references with the sequences:
the image goes with its last holder, never while a sequence that names it is alive, whichever
group, evaluation or demonstration wrote it first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from vlrl.mm.canonical import require_canonical
from vlrl.mm.image_rows import ImageWriter
from vlrl.mm.item import describe_image
from vlrl.mm.patch_grid import PatchRule
from vlrl.records import MMItemMeta, SeqMeta

if TYPE_CHECKING:
    from vlrl.store import PayloadStore


def store_image(store: PayloadStore, pixels: np.ndarray, *, holder: str, rule: PatchRule | None = None) -> MMItemMeta:
    """Write canonical ``pixels`` under their content key, or take one more reference to the row
    already there (no pixels move then); return the meta. Every call is one reference, held by
    ``holder`` (the key of the sequence that will name the image)."""
    pixels = require_canonical(pixels)
    meta = describe_image(pixels, rule=rule)
    ImageWriter(store).put(store, meta, pixels, holder=holder)
    return meta


def image_refs(metas: Sequence[SeqMeta]) -> list[tuple[str, str]]:
    """The ``(image key, sequence key)`` references the sequences hold, one per image they name."""
    return [(item.store_key, meta.key) for meta in metas for item in meta.images]


def delete_sequences(store: PayloadStore, metas: Sequence[SeqMeta], *, missing_ok: bool = False) -> None:
    """Delete the sequences' payloads and drop the reference each holds to each of its images."""
    if not metas:
        return
    store.delete([meta.key for meta in metas], missing_ok=missing_ok)
    store.release(image_refs(metas))
