"""Image pixels in the payload store: written once per distinct content, held by reference.

The key is the content hash (``image_store_key``), so an image seen in many turns, trajectories
or groups is stored once and every ``MMItemMeta`` that names it points at the same row. Each
sequence that names an image holds one reference to its key (``store_image`` takes it, through
the store's ``put_shared``), and ``delete_sequences`` drops the references with the sequences:
the image goes with its last holder, never while a sequence that names it is alive, whichever
group, evaluation or demonstration wrote it first. A branch's prefix rows are held the same way:
the branch holds one reference to the key they are stored under (``prefix_refs``).
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


def prefix_refs(metas: Sequence[SeqMeta]) -> list[tuple[str, str]]:
    """The ``(prefix key, sequence key)`` reference each branch holds to the key its prefix rows
    are stored under (``SeqMeta.prefix_key``)."""
    return [(meta.prefix_key, meta.key) for meta in metas if meta.prefix_key]


def sequence_refs(metas: Sequence[SeqMeta]) -> list[tuple[str, str]]:
    """Every reference the sequences hold: to each image they name, to a branch's prefix key, and
    a shared prefix's own (``SeqMeta.prefix_shared``: it goes by reference, not by deletion)."""
    own = [(meta.key, meta.key) for meta in metas if meta.prefix_shared]
    return image_refs(metas) + prefix_refs(metas) + own


def delete_sequences(store: PayloadStore, metas: Sequence[SeqMeta], *, missing_ok: bool = False) -> None:
    """Delete the sequences' payloads and drop the references each holds (``sequence_refs``). A
    key its branches hold (``SeqMeta.prefix_shared``) loses its own reference only: it goes with
    the last of them, which may be deleted later (a branch a replay buffer kept)."""
    if not metas:
        return
    store.delete([meta.key for meta in metas if not meta.prefix_shared], missing_ok=missing_ok)
    store.release(sequence_refs(metas))
