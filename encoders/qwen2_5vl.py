"""The Qwen2.5-VL vision tower (``transformers``) as a plug-in, behind Qwen2-VL's patch rules.

Qwen2.5-VL keeps Qwen2-VL's processor, patches, 2x2 merger and token rule
(``num_tokens = t * gh * gw / merge^2``; ``PatchTowerEncoder`` holds that part) and changes the
blocks: RMSNorm, a SwiGLU MLP of width ``intermediate_size``, and attention inside
``window_size``-pixel windows of the merged grid except in the ``fullatt_block_indexes`` blocks,
which attend over the whole image. The tower reorders patches window by window for its blocks
and puts the merged rows back in row-major order, so ``forward`` gives the rows the model's own
``get_image_features`` gives. Cost is ``ViTCost`` with those windows (cut short at the edges of a
grid that is not a multiple of them) and the gated MLP: on a 1920x1080 screen under the default
rule the 7B tower costs about two thirds of the same tower with full attention in every block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

from encoders.protocol import EncoderError
from encoders.qwen2vl import PatchTowerEncoder, ViTCost
from vlrl.config import Ge
from vlrl.mm import PatchRule


class Qwen25VLEncoder(PatchTowerEncoder):
    """Qwen2.5-VL's vision tower: windowed patch ViT with a few full-attention blocks, then a 2x2
    merger to the LLM's width."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Tower and processor settings under ``transformers``' names; defaults are
        Qwen2.5-VL-7B's tower (its ``config.json``; ``transformers``' own default
        ``hidden_size=3584`` is the LLM's width, not the tower's 1280)."""

        depth: Annotated[int, Ge(1)] = 32
        """Transformer blocks of the tower."""
        hidden_size: Annotated[int, Ge(1)] = 1280
        """Width of the tower's blocks (Qwen2-VL calls it ``embed_dim``)."""
        out_hidden_size: Annotated[int, Ge(1)] = 3584
        """Width of the merged output rows (the LLM's hidden size)."""
        intermediate_size: Annotated[int, Ge(1)] = 3420
        """Width of each block's SwiGLU MLP."""
        num_heads: Annotated[int, Ge(1)] = 16
        """Attention heads per block; must divide ``hidden_size``."""
        window_size: Annotated[int, Ge(1)] = 112
        """Side of an attention window in resized pixels; floored to whole merged patches."""
        fullatt_block_indexes: tuple[int, ...] = (7, 15, 23, 31)
        """Blocks that attend over the whole image instead of within windows."""
        patch_rule: PatchRule = field(default_factory=PatchRule)
        """The processor's resize, patch and merge rules (``patch_size``, ``merge_size``, ...)."""

        def __post_init__(self) -> None:
            factor = self.patch_rule.factor
            if self.window_size < factor:
                raise ValueError(
                    f"Qwen25VLEncoder.Config.window_size: {self.window_size}; expected >= one merged"
                    f" patch, patch_size * merge_size = {factor} pixels"
                )
            outside = [i for i in self.fullatt_block_indexes if not 0 <= i < self.depth]
            if outside:
                raise ValueError(
                    f"Qwen25VLEncoder.Config.fullatt_block_indexes: {outside} of"
                    f" {self.fullatt_block_indexes}; expected block indexes in [0, depth={self.depth})"
                )

        @property
        def window_patches(self) -> int:
            """Side of a window in patches: the tower floors ``window_size`` to merged patches."""
            rule = self.patch_rule
            return self.window_size // rule.factor * rule.merge_size

        def build(self) -> Qwen25VLEncoder:
            return Qwen25VLEncoder(self)

    name: ClassVar[str] = "qwen2_5vl"
    check_fields: ClassVar[Mapping[str, Any]] = dict(
        depth=2, hidden_size=32, out_hidden_size=64, intermediate_size=64, num_heads=2,
        window_size=56, fullatt_block_indexes=(1,),
        patch_rule=PatchRule(min_pixels=28 * 28, max_pixels=112 * 112),
    )  # fmt: skip

    def __init__(
        self, config: Qwen25VLEncoder.Config, *, tower: Qwen2_5_VisionTransformerPretrainedModel | None = None
    ) -> None:
        """``tower``: adopt an existing tower (its parameters stay shared) instead of building one."""
        rule = config.patch_rule
        super().__init__(
            config,
            tower=tower
            or Qwen2_5_VisionTransformerPretrainedModel(
                Qwen2_5_VLVisionConfig(
                    depth=config.depth,
                    hidden_size=config.hidden_size,
                    out_hidden_size=config.out_hidden_size,
                    intermediate_size=config.intermediate_size,
                    num_heads=config.num_heads,
                    window_size=config.window_size,
                    fullatt_block_indexes=list(config.fullatt_block_indexes),
                    patch_size=rule.patch_size,
                    spatial_merge_size=rule.merge_size,
                    temporal_patch_size=rule.temporal_patch_size,
                )
            ),
            cost_model=ViTCost(
                depth=config.depth,
                embed_dim=config.hidden_size,
                mlp_ratio=config.intermediate_size / config.hidden_size,
                gated_mlp=True,
                hidden_size=config.out_hidden_size,
                patch_size=rule.patch_size,
                merge_size=rule.merge_size,
                temporal_patch_size=rule.temporal_patch_size,
                window=config.window_patches,
                full_attention_layers=tuple(config.fullatt_block_indexes),
            ),
            hidden_size=config.out_hidden_size,
        )

    @classmethod
    def from_model(cls, tower: Qwen2_5_VisionTransformerPretrainedModel, patch_rule: PatchRule) -> Qwen25VLEncoder:
        """The plug-in around a loaded Qwen2.5-VL's own vision tower (``model.model.visual``): the
        trainer encodes through the plug-in path while the checkpoint keeps its parameter names."""
        cls.check_rule(tower, patch_rule)
        vision = tower.config
        try:
            config = cls.Config(
                depth=vision.depth,
                hidden_size=vision.hidden_size,
                out_hidden_size=vision.out_hidden_size,
                intermediate_size=vision.intermediate_size,
                num_heads=vision.num_heads,
                window_size=vision.window_size,
                fullatt_block_indexes=tuple(vision.fullatt_block_indexes),
                patch_rule=patch_rule,
            )
        except ValueError as error:
            raise EncoderError(cls.name, f"the tower's config does not fit: {error}") from error
        return cls(config, tower=tower)
