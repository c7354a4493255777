"""The Qwen2-VL vision tower (``transformers``) as a plug-in, with its processor's patch rules.

Tokens follow ``PatchRule``: the image is ``smart_resize``d, cut into ``patch_size`` patches
(grid ``(t, gh, gw)``) and every ``merge^2`` block becomes one token,
``num_tokens = t * gh * gw / merge^2``. Cost is the tower's forward FLOPs from the grid alone
(``ViTCost``): linear in patches, plus attention quadratic in patches per attention window.
``PatchTowerEncoder`` holds what every such tower shares (Qwen2.5-VL's and Qwen3-VL's too,
``encoders.qwen2_5vl``, ``encoders.qwen3vl``): the rule, the processor, the concatenated patch
batches, the checkpoint prefixes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
import torch
from transformers import Qwen2VLImageProcessor
from transformers.image_utils import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel

from encoders.protocol import EncoderBatch, EncoderError, EncoderInput, VisionEncoder
from vlrl.config import Ge
from vlrl.mm import PatchRule
from vlrl.records import MMItemMeta

CHECKPOINT_PREFIXES = ("", "model.visual.", "visual.")
"""Where the tower's weights sit: its own ``save_pretrained``, or a whole Qwen2-VL, Qwen2.5-VL or
Qwen3-VL checkpoint (``model.visual.``; ``visual.`` in older exports)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ViTCost:
    """Forward FLOPs of a patch ViT + merger from its grid, 2 FLOPs per multiply-add.

    With ``P = t*gh*gw`` patches, width ``d``, MLP ratio ``r``, ``L`` layers, ``m = merge``:

    * linear: patch embed ``2*P*(3*T*p^2)*d``; per layer QKV/out ``8*P*d^2`` and MLP
      ``2*k*r*P*d^2`` for its ``k`` matrices of ``d x r*d`` (``k = 2``: fc1/fc2, Qwen2-VL;
      ``k = 3``: SwiGLU gate/up/down, Qwen2.5-VL); each merger ``2*(P/m^2)*(m^2 d)*(m^2 d + hidden)``
      (Qwen3-VL runs one more per DeepStack level);
    * attention per layer: ``4*d*sum_w S_w^2`` over its attention windows of ``S_w`` patches.
      Full-attention layers have one window, the image (Qwen2-VL: every layer). Windowed layers
      (Qwen2.5-VL: all but ``full_attention_layers``) tile the grid with ``window`` x ``window``
      patch windows (``window_size=112`` px: 4 merged 28 px patches, 8 patches), cut short at the
      edges, so ``sum_w S_w^2 = t * (sum_i a_i^2) * (sum_j b_j^2)`` for row/column segments ``a``, ``b``.
    """

    depth: int
    embed_dim: int
    mlp_ratio: float
    """MLP width over ``embed_dim`` (Qwen2.5-VL: ``intermediate_size / embed_dim``)."""
    hidden_size: int
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    window: int | None = None
    """Side of a window in patches; None for full attention in every layer."""
    full_attention_layers: tuple[int, ...] = ()
    """Layers that attend over the whole image although ``window`` is set."""
    gated_mlp: bool = False
    """SwiGLU MLP: three ``d x r*d`` matrices (gate, up, down) instead of two."""
    mergers: int = 1
    """Patch mergers run: the last layer's, plus one per DeepStack level (Qwen3-VL)."""

    def __call__(self, grid_thw: tuple[int, int, int]) -> float:
        t, gh, gw = grid_thw
        patches, d, m2 = t * gh * gw, self.embed_dim, self.merge_size**2
        linear = 2 * patches * 3 * self.temporal_patch_size * self.patch_size**2 * d
        mlp_matrices = 3 if self.gated_mlp else 2
        linear += self.depth * patches * (8 + 2 * mlp_matrices * self.mlp_ratio) * d * d
        linear += self.mergers * 2 * (patches / m2) * (m2 * d) * (m2 * d + self.hidden_size)
        full = t * (gh * gw) ** 2  # sum of S^2 with the image as the only window
        if self.window is None:
            attention = self.depth * full
        else:
            windowed = t * _square_sum(gh, self.window) * _square_sum(gw, self.window)
            n_full = len(self.full_attention_layers)
            attention = n_full * full + (self.depth - n_full) * windowed
        return float(linear + 4 * d * attention)


def _square_sum(length: int, window: int) -> int:
    """``sum a_i^2`` over the segments that ``window``-long windows cut ``length`` into."""
    return (length // window) * window**2 + (length % window) ** 2


class PatchTowerEncoder(VisionEncoder):
    """What the Qwen towers share behind the processor's ``PatchRule`` (``config.patch_rule``):
    ``preprocess`` flattens an image into its patches, a batch concatenates them (the tower splits
    images by ``grid_thw``), ``forward`` is the tower's ``pooler_output`` (one merged row per
    ``merge^2`` patches, image after image) and the weights are the tower's. Subclasses build the
    tower and its ``ViTCost``."""

    def __init__(
        self,
        config: Any,
        *,
        tower: torch.nn.Module,
        cost_model: ViTCost,
        hidden_size: int,
        image_mean: Sequence[float] = OPENAI_CLIP_MEAN,
        image_std: Sequence[float] = OPENAI_CLIP_STD,
    ) -> None:
        """``config``: the subclass's ``Config`` (it has a ``patch_rule``); ``hidden_size``: the
        width of the merged rows; ``image_mean``/``image_std``: the processor's per-channel
        normalisation (CLIP's for Qwen2-VL and Qwen2.5-VL, 0.5 for Qwen3-VL)."""
        super().__init__()
        self.config = config
        self.hidden_size = hidden_size
        self.tower = tower
        rule = config.patch_rule
        self.processor = Qwen2VLImageProcessor(
            patch_size=rule.patch_size,
            merge_size=rule.merge_size,
            temporal_patch_size=rule.temporal_patch_size,
            min_pixels=rule.min_pixels,
            max_pixels=rule.max_pixels,
            image_mean=list(image_mean),
            image_std=list(image_std),
        )
        self.cost_model = cost_model

    @classmethod
    def check_rule(cls, tower: torch.nn.Module, patch_rule: PatchRule) -> None:
        """Refuse a rule whose patch, merge or temporal size is not the loaded tower's own."""
        vision = tower.config
        if (vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size) != (
            patch_rule.patch_size, patch_rule.merge_size, patch_rule.temporal_patch_size,
        ):  # fmt: skip
            raise EncoderError(cls.name, f"patch rule {patch_rule} disagrees with the tower's config {vision}")

    def grid(self, item: MMItemMeta) -> tuple[int, int, int]:
        """The item's patch grid under this encoder's rule; refuses metadata from another rule."""
        grid = self.config.patch_rule.grid(item.width, item.height)
        if item.grid_thw is not None and item.grid_thw != grid:
            raise EncoderError(
                self.name, f"metadata grid {item.grid_thw} was made by another rule; expected {grid}", item=item
            )
        return grid

    def cost(self, item: MMItemMeta) -> float:
        return self.cost_model(self.grid(item))

    def num_tokens(self, item: MMItemMeta) -> int:
        t, gh, gw = self.grid(item)
        return t * gh * gw // self.config.patch_rule.merge_size**2

    def preprocess(self, pixels: np.ndarray) -> EncoderInput:
        out = self.processor(images=[self.check_pixels(pixels)], return_tensors="pt")
        grid = tuple(int(x) for x in out["image_grid_thw"][0])
        return EncoderInput(
            pixel_values=out["pixel_values"],  # (t*gh*gw, C*T*p*p): flattened patches
            grid_thw=grid,
            num_tokens=grid[0] * grid[1] * grid[2] // self.config.patch_rule.merge_size**2,
        )

    def collate(self, inputs: Sequence[EncoderInput]) -> EncoderBatch:
        """Concatenate patch sequences: the tower splits images by ``grid_thw``."""
        if not inputs:
            raise EncoderError(self.name, "collate got no images")
        return EncoderBatch(
            pixel_values=torch.cat([i.pixel_values for i in inputs]),  # (sum patches, C*T*p*p)
            grid_thw=torch.tensor([i.grid_thw for i in inputs], dtype=torch.int64),
            num_tokens=tuple(i.num_tokens for i in inputs),
        )

    def forward(self, batch: EncoderBatch) -> torch.Tensor:
        pixels = batch.pixel_values.to(self.tower.dtype)
        return self.tower(pixels, grid_thw=batch.grid_thw).pooler_output  # (sum tokens, hidden)

    def save_pretrained(self, path: str | Path) -> Path:
        """Write the tower as ``transformers`` does (config + safetensors)."""
        self.tower.save_pretrained(path)
        return Path(path)

    def load_weights(self, state: Mapping[str, torch.Tensor]) -> None:
        """Take the tower from its own folder or from a whole checkpoint of its model."""
        own = self.tower.state_dict().keys()
        for prefix in CHECKPOINT_PREFIXES:
            if all(prefix + key in state for key in own):
                self.tower.load_state_dict({key: state[prefix + key] for key in own}, strict=True)
                return
        raise RuntimeError(f"no tower weights under any of the prefixes {CHECKPOINT_PREFIXES}")


class Qwen2VLEncoder(PatchTowerEncoder):
    """Qwen2-VL's vision tower: patch ViT with full attention per image, then a 2x2 merger."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Tower and processor settings; defaults are Qwen2-VL-7B's."""

        depth: Annotated[int, Ge(1)] = 32
        """Transformer blocks of the tower."""
        embed_dim: Annotated[int, Ge(1)] = 1280
        """Width of the tower's blocks."""
        hidden_size: Annotated[int, Ge(1)] = 3584
        """Width of the merged output rows (the LLM's hidden size)."""
        num_heads: Annotated[int, Ge(1)] = 16
        """Attention heads per block; must divide ``embed_dim``."""
        mlp_ratio: Annotated[int, Ge(1)] = 4
        """MLP width over ``embed_dim``."""
        patch_rule: PatchRule = field(default_factory=PatchRule)
        """The processor's resize, patch and merge rules (``patch_size``, ``merge_size``, ...)."""

        def build(self) -> Qwen2VLEncoder:
            return Qwen2VLEncoder(self)

    name: ClassVar[str] = "qwen2vl"
    check_fields: ClassVar[Mapping[str, Any]] = dict(
        depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2,
        patch_rule=PatchRule(min_pixels=28 * 28, max_pixels=112 * 112),
    )  # fmt: skip

    def __init__(self, config: Qwen2VLEncoder.Config, *, tower: Qwen2VisionTransformerPretrainedModel | None = None) -> None:
        """``tower``: adopt an existing tower (its parameters stay shared) instead of building one."""
        rule = config.patch_rule
        super().__init__(
            config,
            tower=tower
            or Qwen2VisionTransformerPretrainedModel(
                Qwen2VLVisionConfig(
                    depth=config.depth,
                    embed_dim=config.embed_dim,
                    hidden_size=config.hidden_size,
                    num_heads=config.num_heads,
                    mlp_ratio=config.mlp_ratio,
                    patch_size=rule.patch_size,
                    spatial_merge_size=rule.merge_size,
                    temporal_patch_size=rule.temporal_patch_size,
                )
            ),
            cost_model=ViTCost(
                depth=config.depth,
                embed_dim=config.embed_dim,
                mlp_ratio=config.mlp_ratio,
                hidden_size=config.hidden_size,
                patch_size=rule.patch_size,
                merge_size=rule.merge_size,
                temporal_patch_size=rule.temporal_patch_size,
            ),
            hidden_size=config.hidden_size,
        )

    @classmethod
    def from_model(cls, tower: Qwen2VisionTransformerPretrainedModel, patch_rule: PatchRule) -> Qwen2VLEncoder:
        """The plug-in around a loaded Qwen2-VL's own vision tower (``model.model.visual``): the
        trainer encodes through the plug-in path while the checkpoint keeps its parameter names."""
        cls.check_rule(tower, patch_rule)
        vision = tower.config
        config = cls.Config(
            depth=vision.depth,
            embed_dim=vision.embed_dim,
            hidden_size=vision.hidden_size,
            num_heads=vision.num_heads,
            mlp_ratio=int(vision.mlp_ratio),
            patch_rule=patch_rule,
        )
        return cls(config, tower=tower)
