"""Shared base of encoders that resize every image to one square size.

Their token count and cost do not depend on the image: ``num_tokens`` is the output rows of the
fixed input, and ``cost`` is the forward FLOPs of one image, counted once at build time with
``torch.utils.flop_counter`` on a blank image (so it tracks the real architecture).
"""

from __future__ import annotations

import abc

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from encoders.protocol import EncoderBatch, EncoderInput, VisionEncoder
from vlrl.records import MMItemMeta


class FixedSizeEncoder(VisionEncoder, abc.ABC):
    """Resize to ``image_size`` (bicubic, antialiased), normalise, encode: constant per image."""

    def setup_fixed_size(self, image_size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        """Call at the end of ``__init__``, once the modules exist: probes tokens and FLOPs."""
        self.image_size = image_size
        self.register_buffer("mean", torch.tensor(mean).view(3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(3, 1, 1), persistent=False)
        blank = self.preprocess(np.zeros((image_size, image_size, 3), dtype=np.uint8))
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            rows = self.encode(blank.pixel_values[None]).shape[0]
        self._num_tokens = rows
        self._flops = float(max(counter.get_total_flops(), 1))

    @abc.abstractmethod
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, 3, S, S)`` normalised images -> ``(B * num_tokens, hidden_size)``."""

    def cost(self, item: MMItemMeta) -> float:
        return self._flops

    def num_tokens(self, item: MMItemMeta) -> int:
        return self._num_tokens

    def preprocess(self, pixels: np.ndarray) -> EncoderInput:
        image = torch.from_numpy(self.check_pixels(pixels)).permute(2, 0, 1)[None].float() / 255  # (1, 3, H, W)
        size = (self.image_size, self.image_size)
        image = F.interpolate(image, size=size, mode="bicubic", antialias=True, align_corners=False)[0]
        image = (image.clamp(0, 1) - self.mean) / self.std  # (3, S, S)
        return EncoderInput(pixel_values=image, num_tokens=getattr(self, "_num_tokens", 1))

    def forward(self, batch: EncoderBatch) -> torch.Tensor:
        return self.encode(batch.pixel_values.to(self.mean.dtype))
