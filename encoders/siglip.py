"""SigLIP's vision transformer (``transformers``) as a plug-in: fixed resize, one row per patch.

``num_tokens = (image_size / patch_size / pool)^2``: the patch grid, optionally average-pooled
``pool x pool`` to cut the LLM's sequence length. Cost is constant per image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

import torch
import torch.nn.functional as F
from transformers import SiglipVisionConfig, SiglipVisionModel

from encoders.fixed_size import FixedSizeEncoder
from vlrl.config import ConfigError, Ge

SIGLIP_MEAN = SIGLIP_STD = (0.5, 0.5, 0.5)
"""SigLIP normalises pixels to ``[-1, 1]``."""


class SiglipEncoder(FixedSizeEncoder):
    """``SiglipVisionModel`` last hidden states, one row per (pooled) patch."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Model settings; defaults are SigLIP-base-patch16-224's."""

        image_size: Annotated[int, Ge(1)] = 224
        """Side every image is resized to."""
        patch_size: Annotated[int, Ge(1)] = 16
        """Side of one patch; must divide ``image_size``."""
        hidden_size: Annotated[int, Ge(1)] = 768
        """Width of the transformer and of the output rows."""
        intermediate_size: Annotated[int, Ge(1)] = 3072
        """MLP width."""
        num_hidden_layers: Annotated[int, Ge(1)] = 12
        """Transformer blocks."""
        num_attention_heads: Annotated[int, Ge(1)] = 12
        """Attention heads; must divide ``hidden_size``."""
        pool: Annotated[int, Ge(1)] = 1
        """Average-pool ``pool x pool`` patches into one token; must divide the patch grid side."""

        def check(self) -> None:
            side = self.image_size // self.patch_size
            if self.image_size % self.patch_size:
                raise ConfigError("patch_size", self.patch_size, f"a divisor of image_size={self.image_size}")
            if side % self.pool:
                raise ConfigError("pool", self.pool, f"a divisor of the patch grid side {side}")

        def build(self) -> SiglipEncoder:
            self.check()
            return SiglipEncoder(self)

    name: ClassVar[str] = "siglip"
    check_fields: ClassVar[Mapping[str, Any]] = dict(
        image_size=32, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2
    )

    def __init__(self, config: SiglipEncoder.Config) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.model = SiglipVisionModel(
            SiglipVisionConfig(
                image_size=config.image_size,
                patch_size=config.patch_size,
                hidden_size=config.hidden_size,
                intermediate_size=config.intermediate_size,
                num_hidden_layers=config.num_hidden_layers,
                num_attention_heads=config.num_attention_heads,
                vision_use_head=False,  # rows are patch states; the pooling head would go untrained
            )
        )
        self.setup_fixed_size(config.image_size, SIGLIP_MEAN, SIGLIP_STD)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        states = self.model(pixel_values=images).last_hidden_state  # (B, side^2, D)
        b, n, d = states.shape
        side = self.config.image_size // self.config.patch_size
        if self.config.pool > 1:
            grid = states.transpose(1, 2).reshape(b, d, side, side)  # (B, D, side, side)
            states = F.avg_pool2d(grid, self.config.pool).flatten(2).transpose(1, 2)  # (B, n / pool^2, D)
        return states.reshape(-1, d)

    def save_pretrained(self, path: str | Path) -> Path:
        """Write the model as ``transformers`` does (config + safetensors)."""
        self.model.save_pretrained(path)
        return Path(path)

    def load_weights(self, state: Mapping[str, torch.Tensor]) -> None:
        """Take a ``SiglipVisionModel`` folder's weights."""
        self.model.load_state_dict(dict(state), strict=True)
