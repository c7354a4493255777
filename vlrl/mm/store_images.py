"""Writing image pixels to the payload store, once per distinct content.

The key is the content hash (``image_store_key``), so an image seen in many turns, trajectories
or groups is stored once and every ``MMItemMeta`` that names it points at the same row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from vlrl.mm.canonical import require_canonical
from vlrl.mm.item import describe_image
from vlrl.mm.patch_grid import PatchRule
from vlrl.records import PIXELS, MMItemMeta
from vlrl.store.errors import DuplicateWriteError

if TYPE_CHECKING:
    from vlrl.store import PayloadStore


def store_image(
    store: PayloadStore, pixels: np.ndarray, *, rule: PatchRule | None = None
) -> MMItemMeta:
    """Write canonical ``pixels`` under their content key unless already stored; return the meta.

    A ``DuplicateWriteError`` means a concurrent writer won the race between ``contains`` and
    ``put``; the key names the content, so what it stored is these same bytes.
    """
    pixels = require_canonical(pixels)
    meta = describe_image(pixels, rule=rule)
    if not store.contains([meta.store_key])[0]:
        try:
            store.put(meta.store_key, {PIXELS: pixels})
        except DuplicateWriteError:
            pass
    return meta
