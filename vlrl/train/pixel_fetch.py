"""Lazy pixel fetch: each encoder rank reads from the store the pixels of exactly the images the
plan gave it, and nothing else; the next micro-batch's pixels are fetched on a background
thread while the current one computes."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from vlrl.mm import PIXELS_FIELD, image_store_key
from vlrl.store.errors import KeyMissingError
from vlrl.train.encode_plan import EncodePlan


class PixelFetcher:
    def __init__(self, store: Any, rank: int) -> None:
        self._store = store
        self._rank = rank
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"pixel-fetch-{rank}")

    def fetch(self, plan: EncodePlan) -> list[np.ndarray]:
        """Pixels of this rank's items, in the plan's output order for the rank."""
        return self.fetch_images([plan.hashes[i] for i in plan.items_of(self._rank)])

    def fetch_images(self, hashes: list[str]) -> list[np.ndarray]:
        """Pixels of the images ``hashes`` (some of this rank's items), in that order."""
        if not hashes:
            return []
        keys = [image_store_key(h) for h in hashes]
        present = self._store.contains(keys)
        missing = [h for h, ok in zip(hashes, present) if not ok]
        if missing:
            raise KeyMissingError(
                f"rank {self._rank}: pixels of image(s) {missing[:3]} are not in the store (keys {keys[:1]}...)"
            )
        rows = self._store.get(keys, [PIXELS_FIELD])
        return [rows[key][PIXELS_FIELD] for key in keys]

    def prefetch(self, plan: EncodePlan) -> Future[list[np.ndarray]]:
        """Start fetching ``plan``'s pixels now; ``.result()`` when the micro-batch needs them."""
        return self._thread.submit(self.fetch, plan)

    def close(self) -> None:
        self._thread.shutdown(wait=True)
