"""A user's own encoder, written against the plug-in protocol only: no change to vlrl needed.

It cuts the image into ``cell x cell`` pixel blocks after a resize to a multiple of ``cell`` (at
most ``max_side``), and projects each block's mean colour: tokens and cost grow with the image.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from encoders.protocol import EncoderBatch, EncoderInput, VisionEncoder
from vlrl.records import MMItemMeta


class BlockColourEncoder(VisionEncoder):
    name = "block_colour"

    def __init__(self, hidden_size: int = 8, cell: int = 16, max_side: int = 128) -> None:
        super().__init__()
        self.hidden_size, self.cell, self.max_side = hidden_size, cell, max_side
        self.project = nn.Sequential(nn.Linear(3, hidden_size), nn.Tanh(), nn.Linear(hidden_size, hidden_size))

    def grid(self, width: int, height: int) -> tuple[int, int]:
        fit = lambda side: max(1, min(self.max_side, side) // self.cell)  # noqa: E731
        return fit(height), fit(width)

    def cost(self, item: MMItemMeta) -> float:
        rows, cols = self.grid(item.width, item.height)
        return float(rows * cols * self.hidden_size)

    def num_tokens(self, item: MMItemMeta) -> int:
        return math.prod(self.grid(item.width, item.height))

    def preprocess(self, pixels: np.ndarray) -> EncoderInput:
        rows, cols = self.grid(pixels.shape[1], pixels.shape[0])
        image = torch.from_numpy(self.check_pixels(pixels)).permute(2, 0, 1)[None].float() / 255
        cells = F.adaptive_avg_pool2d(image, (rows, cols))[0]  # (3, rows, cols)
        return EncoderInput(pixel_values=cells.flatten(1).T, num_tokens=rows * cols)  # (cells, 3)

    def collate(self, inputs) -> EncoderBatch:
        return EncoderBatch(
            pixel_values=torch.cat([i.pixel_values for i in inputs]),
            grid_thw=torch.tensor([i.grid_thw for i in inputs]),
            num_tokens=tuple(i.num_tokens for i in inputs),
        )

    def forward(self, batch: EncoderBatch) -> torch.Tensor:
        return self.project(batch.pixel_values)  # (sum cells, hidden)
