"""Image preprocessing (the model's processor, or a plug-in encoder's) and the engine's image
cache: processed pixels by content hash, bounded by bytes.

Preprocessing depends only on the pixels, never on the weights, so entries survive weight
updates; what a client references by hash is looked up here, and an evicted hash is answered
with ``CacheMiss`` so the client resends its pixels.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from encoders.protocol import EncoderError, EncoderInput, VisionEncoder
from vlrl.mm import PatchRule, content_hash
from vlrl.rollout.protocol import ImagePart


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    """One image as the engine's encoder takes it, and the grid its tokens take in the prompt."""

    input: EncoderInput
    """The encoder's input: the tower's flattened patches, or a plug-in encoder's ``preprocess``."""
    grid_thw: tuple[int, int, int]
    """The processor's patch grid (t, h, w) before merging: the M-RoPE positions of its tokens."""

    @property
    def pixel_values(self) -> torch.Tensor:
        return self.input.pixel_values

    @property
    def num_tokens(self) -> int:
        """LLM tokens the image becomes: t * h * w / merge_size**2."""
        return self.input.num_tokens

    @property
    def nbytes(self) -> int:
        return self.pixel_values.numel() * self.pixel_values.element_size()


def preprocess(image_processor, part: ImagePart) -> ProcessedImage:
    """Run the model's image processor on ``part``'s pixels (blocking: call it off the event loop)."""
    out = image_processor(images=[_checked(part)], input_data_format="channels_last", return_tensors="pt")
    grid = tuple(int(x) for x in out["image_grid_thw"][0])  # (t, h, w)
    tokens = grid[0] * grid[1] * grid[2] // image_processor.merge_size**2
    return ProcessedImage(EncoderInput(pixel_values=out["pixel_values"], num_tokens=tokens, grid_thw=grid), grid)


def preprocess_plug_in(encoder: VisionEncoder, rule: PatchRule, part: ImagePart) -> ProcessedImage:
    """A plug-in encoder's ``preprocess`` of ``part``; its tokens take the patch rule's grid."""
    pixels = _checked(part)
    height, width = pixels.shape[:2]
    prepared = encoder.preprocess(pixels)
    expected = rule.num_tokens(width, height)
    if prepared.num_tokens != expected:
        raise EncoderError(
            encoder.name,
            f"preprocess gives {prepared.num_tokens} rows for a {width}x{height} image; the patch rule gives {expected}",
        )
    return ProcessedImage(prepared, rule.grid(width, height))


def _checked(part: ImagePart) -> np.ndarray:
    """The pixels, once their hash is checked: a wrong one would file them under another image's
    identity and poison the cache for every trajectory that references it."""
    actual = content_hash(part.pixels)
    if actual != part.content_hash:
        raise ValueError(
            f"image {part.content_hash}: the pixels sent hash to {actual}; send the content_hash"
            " of the canonical pixels (vlrl.mm.content_hash)"
        )
    return part.pixels


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
