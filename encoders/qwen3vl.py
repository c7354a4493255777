"""The Qwen3-VL vision tower (``transformers``) as a plug-in: one row per merged patch, DeepStack
levels side by side.

The tower is Qwen2-VL's recipe with 16 px patches, learned position embeddings (a square table,
bilinearly interpolated to each image's grid) and DeepStack: after each block listed in
``deepstack_visual_indexes`` an extra merger gives one more ``(tokens, hidden)`` feature, which the
LLM adds to its hidden states at the image tokens right after decoder layer ``k`` (level ``k``).
``forward`` returns ``[pooler_output | level 0 | level 1 | ...]`` in one row per token
(``feature_levels = 1 + len(deepstack_visual_indexes)``), so the trainer's planning, pixel fetch
and all-to-all carry every level without knowing about them.

Tokens, batches and weights are ``PatchTowerEncoder``'s: Qwen3-VL's processor is the Qwen2-VL image
processor class (``AutoImageProcessor`` maps ``qwen3_vl`` to ``Qwen2VLImageProcessor``) with
``patch_size=16`` and mean/std 0.5, so ``vlrl.mm.patch_rule_of`` predicts its grids. Cost is
``ViTCost`` with one merger per level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

from encoders.protocol import EncoderBatch
from encoders.qwen2vl import PatchTowerEncoder, ViTCost
from vlrl.config import Ge
from vlrl.mm import PatchRule

IMAGE_MEAN = (0.5, 0.5, 0.5)
"""Per-channel mean of Qwen3-VL's image processor (its checkpoints' ``preprocessor_config.json``)."""
IMAGE_STD = (0.5, 0.5, 0.5)
"""Per-channel standard deviation of Qwen3-VL's image processor."""


def _qwen3vl_rule() -> PatchRule:
    """Qwen3-VL checkpoints' processor rule: 16 px patches, 256^2 to 4096^2 resized pixels."""
    return PatchRule(patch_size=16, min_pixels=256 * 256, max_pixels=4096 * 4096)


class Qwen3VLEncoder(PatchTowerEncoder):
    """Qwen3-VL's vision tower: patch ViT with learned, interpolated positions, a 2x2 merger and
    one DeepStack merger per ``deepstack_visual_indexes`` entry."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Tower and processor settings; defaults are transformers' ``Qwen3VLVisionConfig``."""

        depth: Annotated[int, Ge(1)] = 27
        """Transformer blocks of the tower."""
        embed_dim: Annotated[int, Ge(1)] = 1152
        """Width of the tower's blocks (``Qwen3VLVisionConfig.hidden_size``)."""
        intermediate_size: Annotated[int, Ge(1)] = 4304
        """Width of each block's MLP."""
        hidden_size: Annotated[int, Ge(1)] = 3584
        """Width of the merged output rows, the LLM's hidden size (``out_hidden_size``)."""
        num_heads: Annotated[int, Ge(1)] = 16
        """Attention heads per block; must divide ``embed_dim``."""
        num_position_embeddings: Annotated[int, Ge(1)] = 2304
        """Entries of the learned position table, a square (48 x 48) resampled to each grid."""
        deepstack_visual_indexes: tuple[int, ...] = (8, 16, 24)
        """Blocks whose output feeds a DeepStack merger, increasing; level ``k`` is the ``k``-th."""
        hidden_act: str = "gelu_pytorch_tanh"
        """Activation of the blocks' MLPs."""
        patch_rule: PatchRule = field(default_factory=_qwen3vl_rule)
        """The processor's resize, patch and merge rules (Qwen3-VL's: ``patch_size=16``)."""

        def __post_init__(self) -> None:
            indexes = self.deepstack_visual_indexes
            if list(indexes) != sorted(set(indexes)) or not all(0 <= i < self.depth for i in indexes):
                raise ValueError(
                    f"Qwen3VLEncoder.Config.deepstack_visual_indexes: {indexes!r}; expected increasing"
                    f" block indexes in [0, depth={self.depth})"
                )
            side = round(self.num_position_embeddings**0.5)
            if side * side != self.num_position_embeddings:
                raise ValueError(
                    f"Qwen3VLEncoder.Config.num_position_embeddings: {self.num_position_embeddings};"
                    " expected a square (the table is a side x side grid)"
                )

        def build(self) -> Qwen3VLEncoder:
            return Qwen3VLEncoder(self)

    name: ClassVar[str] = "qwen3vl"
    check_fields: ClassVar[Mapping[str, Any]] = dict(
        depth=2, embed_dim=32, intermediate_size=64, hidden_size=64, num_heads=2, num_position_embeddings=64,
        deepstack_visual_indexes=(0,), patch_rule=PatchRule(patch_size=16, min_pixels=32 * 32, max_pixels=128 * 128),
    )  # fmt: skip

    def __init__(self, config: Qwen3VLEncoder.Config, *, tower: Qwen3VLVisionModel | None = None) -> None:
        """``tower``: adopt an existing tower (its parameters stay shared) instead of building one."""
        rule = config.patch_rule
        super().__init__(
            config,
            tower=tower
            or Qwen3VLVisionModel(
                Qwen3VLVisionConfig(
                    depth=config.depth,
                    hidden_size=config.embed_dim,
                    intermediate_size=config.intermediate_size,
                    out_hidden_size=config.hidden_size,
                    num_heads=config.num_heads,
                    num_position_embeddings=config.num_position_embeddings,
                    deepstack_visual_indexes=list(config.deepstack_visual_indexes),
                    hidden_act=config.hidden_act,
                    patch_size=rule.patch_size,
                    spatial_merge_size=rule.merge_size,
                    temporal_patch_size=rule.temporal_patch_size,
                )
            ),
            cost_model=ViTCost(
                depth=config.depth,
                embed_dim=config.embed_dim,
                mlp_ratio=config.intermediate_size / config.embed_dim,
                hidden_size=config.hidden_size,
                patch_size=rule.patch_size,
                merge_size=rule.merge_size,
                temporal_patch_size=rule.temporal_patch_size,
                mergers=1 + len(config.deepstack_visual_indexes),
            ),
            hidden_size=config.hidden_size,
            image_mean=IMAGE_MEAN,
            image_std=IMAGE_STD,
        )
        self.feature_levels = 1 + len(config.deepstack_visual_indexes)

    @classmethod
    def from_model(cls, tower: Qwen3VLVisionModel, patch_rule: PatchRule) -> Qwen3VLEncoder:
        """The plug-in around a loaded Qwen3-VL's own vision tower (``model.model.visual``): the
        trainer encodes through the plug-in path while the checkpoint keeps its parameter names."""
        cls.check_rule(tower, patch_rule)
        vision = tower.config
        config = cls.Config(
            depth=vision.depth,
            embed_dim=vision.hidden_size,
            intermediate_size=vision.intermediate_size,
            hidden_size=vision.out_hidden_size,
            num_heads=vision.num_heads,
            num_position_embeddings=vision.num_position_embeddings,
            deepstack_visual_indexes=tuple(getattr(vision, "deepstack_visual_indexes", ())),  # none in Qwen3.5's tower
            hidden_act=vision.hidden_act,
            patch_rule=patch_rule,
        )
        return cls(config, tower=tower)

    def forward(self, batch: EncoderBatch) -> torch.Tensor:
        out = self.tower(batch.pixel_values.to(self.tower.dtype), grid_thw=batch.grid_thw)
        levels = getattr(out, "deepstack_features", None) or []
        return torch.cat([out.pooler_output, *levels], dim=1)  # (sum tokens, hidden * levels)
