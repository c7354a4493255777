"""Lazy pixel fetch: each encoder rank reads from the store the pixels of exactly the images the
plan gave it, and nothing else (``StepEncoder`` calls it on its background thread)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vlrl.mm.image_rows import read_images
from vlrl.records import image_store_key
from vlrl.store.errors import KeyMissingError


def fetch_pixels(store: Any, hashes: list[str], *, rank: int) -> list[np.ndarray]:
    """Pixels of the images ``hashes``, in that order; ``rank`` names the reader in errors."""
    if not hashes:
        return []
    keys = [image_store_key(h) for h in hashes]
    present = store.contains(keys)
    missing = [h for h, ok in zip(hashes, present) if not ok]
    if missing:
        raise KeyMissingError(f"rank {rank}: pixels of image(s) {missing[:3]} are not in the store (keys {keys[:1]}...)")
    pixels = read_images(store, keys)
    return [pixels[key] for key in keys]
