"""Train the click agent with your own vision encoder in place of the Qwen2-VL vision tower.

    vlrl train examples/train_custom_encoder.py            # train_click's main job, this encoder
    vlrl train examples/train_custom_encoder.py:small      # a 2-step smoke run (CI, about a minute)
    vlrl train examples/train_custom_encoder.py --resume   # continue from the last checkpoint

``ConvPatchEncoder`` below is user code: a small conv net over the processor-resized screenshot.
Loading this file registers it as ``conv-patch``; the same ``EncoderSpec`` on ``engine.encoder``
and ``trainer.encoder`` makes the rollout engines and the trainer encode every image with
it (Ray ships the class to their actors by value). Its weights start from the spec's seed, train
with the LLM, reach the engines with every weight push, and are saved in each checkpoint's
``hf/encoder/`` (``--resume`` restores them).

The one rule an encoder used end to end keeps: one output row per merged 28x28 patch of the
resized image, row-major, as the processor's patch rule counts image tokens in the prompts and
their M-RoPE positions. A run refuses an encoder that breaks it before any actor starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from encoders import registry
from encoders.protocol import EncoderBatch, EncoderInput, VisionEncoder
from encoders.spec import EncoderSpec
from vlrl.config import Ge, load_recipe
from vlrl.job.train_job import TrainJob
from vlrl.mm import PatchRule
from vlrl.models import TinyModel
from vlrl.records import MMItemMeta

CLICK = Path(__file__).with_name("train_click.py")


class ConvPatchEncoder(VisionEncoder):
    """Stride-14 patch conv, residual 3x3 conv blocks, then each 2x2 block of patches merged by
    an MLP into one row of the LLM's width: the Qwen2-VL patch rule's rows, without a ViT."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Net widths and the processor's resize bounds (the policy's, or startup refuses it)."""

        hidden_size: Annotated[int, Ge(1)] = 64
        """Width of the output rows: the LLM's hidden size."""
        channels: Annotated[int, Ge(1)] = 32
        """Feature channels per patch."""
        layers: Annotated[int, Ge(0)] = 2
        """Residual 3x3 conv blocks over the patch grid (each widens the receptive field by a patch)."""
        min_pixels: Annotated[int, Ge(28 * 28)] = 56 * 56
        """The processor's smallest resized area."""
        max_pixels: Annotated[int, Ge(28 * 28)] = 224 * 224
        """The processor's largest resized area."""

        def build(self) -> ConvPatchEncoder:
            return ConvPatchEncoder(self)

    name: ClassVar[str] = "conv-patch"
    check_fields: ClassVar[dict] = dict(hidden_size=16, channels=8, layers=1)

    def __init__(self, config: ConvPatchEncoder.Config) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.rule = PatchRule(min_pixels=config.min_pixels, max_pixels=config.max_pixels)
        c, p, m = config.channels, self.rule.patch_size, self.rule.merge_size
        self.patchify = nn.Conv2d(3, c, kernel_size=p, stride=p)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.GELU(), nn.Conv2d(c, c, 3, padding=1))
            for _ in range(config.layers)
        )
        self.merge = nn.Sequential(
            nn.LayerNorm(m * m * c), nn.Linear(m * m * c, config.hidden_size), nn.GELU(),
            nn.Linear(config.hidden_size, config.hidden_size),
        )  # fmt: skip

    def num_tokens(self, item: MMItemMeta) -> int:
        return self.rule.num_tokens(item.width, item.height)

    def cost(self, item: MMItemMeta) -> float:
        """Multiply-adds x 2: per patch the patch conv and the blocks, per row the merge MLP."""
        _, gh, gw = self.rule.grid(item.width, item.height)
        c, h, p = self.config.channels, self.hidden_size, self.rule.patch_size
        per_patch = 3 * p * p * c + self.config.layers * 2 * 9 * c * c
        per_row = 4 * c * h + h * h
        return 2.0 * (gh * gw * per_patch + self.num_tokens(item) * per_row)

    def preprocess(self, pixels: np.ndarray) -> EncoderInput:
        """Resize to the patch rule's size (bicubic), scale to [-1, 1]: ``(3, H, W)``."""
        pixels = self.check_pixels(pixels)
        grid = self.rule.grid(pixels.shape[1], pixels.shape[0])
        _, gh, gw = grid
        image = torch.tensor(pixels, dtype=torch.float32).permute(2, 0, 1)[None] / 255  # (1, 3, h, w)
        size = (gh * self.rule.patch_size, gw * self.rule.patch_size)
        image = F.interpolate(image, size=size, mode="bicubic", antialias=True, align_corners=False)[0]
        tokens = gh * gw // self.rule.merge_size**2
        return EncoderInput(pixel_values=image.clamp(0, 1) * 2 - 1, num_tokens=tokens, grid_thw=grid)

    def collate(self, inputs: list[EncoderInput]) -> EncoderBatch:
        """Images differ in size: concatenate them flat; ``grid_thw`` gives each one's shape back."""
        return EncoderBatch(
            pixel_values=torch.cat([i.pixel_values.flatten() for i in inputs]),
            grid_thw=torch.tensor([i.grid_thw for i in inputs], dtype=torch.int64),
            num_tokens=tuple(i.num_tokens for i in inputs),
        )

    def forward(self, batch: EncoderBatch) -> torch.Tensor:
        p = self.rule.patch_size
        grids = batch.grid_thw.tolist()
        flats = batch.pixel_values.split([3 * gh * p * gw * p for _, gh, gw in grids])
        images = [flat.view(1, 3, gh * p, gw * p) for flat, (_, gh, gw) in zip(flats, grids)]
        return torch.cat([self.encode(image.to(self.patchify.weight.dtype)) for image in images])  # (sum rows, hidden)

    def encode(self, image: torch.Tensor) -> torch.Tensor:
        """``(1, 3, H, W)`` -> ``(H/28 * W/28, hidden)``, rows row-major over the merged grid."""
        x = self.patchify(image)  # (1, C, gh, gw)
        for block in self.blocks:
            x = x + block(x)
        _, c, gh, gw = x.shape
        m = self.rule.merge_size
        x = x[0].view(c, gh // m, m, gw // m, m).permute(1, 3, 2, 4, 0)  # (gh/m, gw/m, m, m, C)
        return self.merge(x.reshape(-1, m * m * c))


registry.register(ConvPatchEncoder.name, ConvPatchEncoder)


def conv_encoder(tiny: TinyModel) -> EncoderSpec:
    """The spec both sides use: one name, fields and seed give the same initial weights."""
    fields = dict(hidden_size=64, channels=32, layers=2, min_pixels=tiny.min_pixels, max_pixels=tiny.max_pixels)
    return EncoderSpec(name=ConvPatchEncoder.name, fields=fields, seed=0)


def with_encoder(config: TrainJob.Config, run_dir: str) -> TrainJob.Config:
    config.run_dir = run_dir
    config.engine.encoder = conv_encoder(config.tiny)
    config.trainer.encoder = conv_encoder(config.tiny)
    return config


def recipe() -> TrainJob.Config:
    """train_click's main job (warm start, then GRPO) with ``ConvPatchEncoder`` as the vision encoder."""
    return with_encoder(load_recipe(f"{CLICK}:recipe"), "runs/train_custom_encoder")


def small() -> TrainJob.Config:
    """train_click's smoke run with this encoder: 2 warm-start steps, 2 RL steps."""
    return with_encoder(load_recipe(f"{CLICK}:small"), "runs/train_custom_encoder_small")
