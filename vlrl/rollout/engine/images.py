"""The engine's image cache: processed pixels by content hash, bounded by bytes.

The processor's output (``pixel_values`` and the patch grid) depends only on the pixels, never on
the weights, so entries survive weight updates; what a client references by hash is looked up
here, and an evicted hash is answered with ``CacheMiss`` so the client resends its pixels.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from vlrl.mm import content_hash
from vlrl.rollout.protocol import ImagePart


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    """One image as the vision tower takes it."""

    pixel_values: torch.Tensor
    """(patches, channels * temporal_patch * patch * patch) normalised patches."""
    grid_thw: tuple[int, int, int]
    """The patch grid (t, h, w) before merging."""
    num_tokens: int
    """LLM tokens the image becomes: t * h * w / merge_size**2."""

    @property
    def nbytes(self) -> int:
        return self.pixel_values.numel() * self.pixel_values.element_size()


def preprocess(image_processor, part: ImagePart) -> ProcessedImage:
    """Run the model's image processor on ``part``'s pixels (blocking: call it off the event loop).

    The hash is checked first: a wrong one would file these pixels under another image's identity
    and poison the cache for every trajectory that references it.
    """
    actual = content_hash(part.pixels)
    if actual != part.content_hash:
        raise ValueError(
            f"image {part.content_hash}: the pixels sent hash to {actual}; send the content_hash"
            " of the canonical pixels (vlrl.mm.content_hash)"
        )
    out = image_processor(images=[part.pixels], input_data_format="channels_last", return_tensors="pt")
    t, h, w = (int(x) for x in out["image_grid_thw"][0])
    return ProcessedImage(
        pixel_values=out["pixel_values"],
        grid_thw=(t, h, w),
        num_tokens=t * h * w // image_processor.merge_size**2,
    )


class ImageCache:
    """Least-recently-used ``ProcessedImage`` by content hash, at most ``max_bytes`` in total.

    The newest entry is always kept, so an image larger than the whole bound still serves the
    request that brought it.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[str, ProcessedImage] = OrderedDict()
        self.nbytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> ProcessedImage | None:
        image = self._entries.get(key)
        if image is not None:
            self._entries.move_to_end(key)
        return image

    def put(self, key: str, image: ProcessedImage) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        self._entries[key] = image
        self.nbytes += image.nbytes
        while self.nbytes > self._max_bytes and len(self._entries) > 1:
            _, evicted = self._entries.popitem(last=False)
            self.nbytes -= evicted.nbytes
            self.evictions += 1
