"""``describe_image``: the ``MMItemMeta`` (``vlrl.records``) of canonical pixels."""

from __future__ import annotations

import numpy as np

from vlrl.mm.canonical import require_canonical
from vlrl.mm.content_hash import content_hash
from vlrl.mm.patch_grid import PatchRule
from vlrl.records import MMItemMeta, image_store_key


def describe_image(pixels: np.ndarray, *, rule: PatchRule | None = None) -> MMItemMeta:
    """Return the metadata of canonical pixels, with grid and tokens when ``rule`` is given."""
    pixels = require_canonical(pixels)
    height, width = pixels.shape[:2]
    digest = content_hash(pixels)
    meta = MMItemMeta(
        content_hash=digest,
        width=width,
        height=height,
        nbytes=pixels.nbytes,
        store_key=image_store_key(digest),
    )
    return meta if rule is None else meta.with_patch_rule(rule)
