"""The vision encoder plug-in contract: cost and tokens from metadata, embeddings from pixels.

The encoder planner balances image items across ranks knowing only ``MMItemMeta``, so an encoder
must answer ``cost`` and ``num_tokens`` without pixels; the rank that owns an item then fetches its
pixels, ``preprocess``es them, ``collate``s its items and runs ``forward`` once. The rows of
``forward`` are the embeddings the LLM's image placeholder tokens take, image after image, so
``num_tokens`` must equal each image's row count exactly (``registry.check_encoder`` verifies it).

An encoder may give several feature levels per token, side by side in one row (Qwen3-VL's
DeepStack: features of inner tower layers that the LLM adds after its first decoder layers).
Keeping them in one ``(tokens, hidden_size * feature_levels)`` tensor lets planning, pixel fetch
and the all-to-all carry every level unchanged, and one backward returns every level's gradient.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from safetensors.torch import load_file, save_model
from torch import nn

from vlrl.errors import PicklesWhole
from vlrl.mm import require_canonical
from vlrl.records import MMItemMeta

WEIGHTS_FILE = "model.safetensors"
"""The file ``save_pretrained`` writes (the name ``transformers`` uses too)."""


class EncoderError(PicklesWhole, ValueError):
    """A plug-in broke its contract or got input it cannot encode; names the encoder and item."""

    def __init__(self, encoder: str, message: str, *, item: MMItemMeta | None = None) -> None:
        where = f"encoder {encoder!r}"
        if item is not None:
            where += f", image {item.content_hash[:12]} ({item.width}x{item.height})"
        super().__init__(f"{where}: {message}")
        self.encoder = encoder
        self.item = item


@dataclass(frozen=True, slots=True, kw_only=True)
class EncoderInput:
    """One preprocessed image: what ``collate`` batches."""

    pixel_values: torch.Tensor
    """The encoder's input tensor for this image (layout is the encoder's own)."""
    num_tokens: int
    """Rows ``forward`` gives for this image; equals ``num_tokens`` of its metadata."""
    grid_thw: tuple[int, int, int] = (1, 1, 1)
    """Patch grid of patch-sequence encoders (Qwen2-VL); unused by fixed-size ones."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EncoderBatch:
    """Several images ready for one ``forward``."""

    pixel_values: torch.Tensor
    """Stacked (fixed-size encoders) or concatenated (patch sequences) inputs."""
    grid_thw: torch.Tensor
    """``(n_images, 3)`` int64: each image's patch grid, in order."""
    num_tokens: tuple[int, ...]
    """Rows of each image in the output, in order."""


class VisionEncoder(nn.Module, abc.ABC):
    """A trainable image encoder: ``forward(batch) -> (sum num_tokens, hidden_size * feature_levels)``."""

    name: ClassVar[str]
    """Short id used in errors and as the default registry name."""
    check_fields: ClassVar[Mapping[str, Any]] = {}
    """Fields of a small instance that the registration check builds (fast on a CPU)."""

    hidden_size: int
    """Width of each feature level (the LLM's embedding size after any projection)."""
    feature_levels: int = 1
    """Blocks of ``H = hidden_size`` columns per row: columns ``[:H]`` are the embedding spliced at
    the image tokens; DeepStack level ``k`` (columns ``[(k+1)H, (k+2)H)``) is added to the LLM's
    hidden states at those tokens right after decoder layer ``k``."""

    @property
    def row_width(self) -> int:
        """Columns of each ``forward`` row, every feature level side by side."""
        return self.hidden_size * self.feature_levels

    @abc.abstractmethod
    def cost(self, item: MMItemMeta) -> float:
        """Relative forward cost of one image from metadata alone (never pixels), > 0."""

    @abc.abstractmethod
    def num_tokens(self, item: MMItemMeta) -> int:
        """Rows ``forward`` gives for this image, from metadata alone."""

    @abc.abstractmethod
    def preprocess(self, pixels: np.ndarray) -> EncoderInput:
        """Canonical RGB ``uint8`` ``[H, W, 3]`` pixels -> tensors for one image."""

    @abc.abstractmethod
    def forward(self, batch: EncoderBatch) -> torch.Tensor:
        """``(sum num_tokens, hidden_size * feature_levels)``: the rows of every image of
        ``batch``, in order."""

    def collate(self, inputs: Sequence[EncoderInput]) -> EncoderBatch:
        """Stack same-shaped inputs; patch-sequence encoders concatenate instead."""
        if not inputs:
            raise EncoderError(self.name, "collate got no images")
        return EncoderBatch(
            pixel_values=torch.stack([i.pixel_values for i in inputs]),
            grid_thw=torch.tensor([i.grid_thw for i in inputs], dtype=torch.int64),
            num_tokens=tuple(i.num_tokens for i in inputs),
        )

    def save_pretrained(self, path: str | Path) -> Path:
        """Write the weights to ``path/model.safetensors`` (a folder ``load`` reads back)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_model(self, str(path / WEIGHTS_FILE))
        return path

    def load(self, path: str | Path) -> VisionEncoder:
        """Load weights from a ``.safetensors`` file or a folder of them (shards merged)."""
        path = Path(path)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise EncoderError(self.name, f"no safetensors weights at {path}")
        state: dict[str, torch.Tensor] = {}
        for file in files:
            state.update(load_file(str(file)))
        try:
            self.load_weights(state)
        except RuntimeError as error:  # missing/unexpected keys or shape mismatch
            raise EncoderError(self.name, f"weights at {path} do not fit: {error}") from error
        return self

    def load_weights(self, state: Mapping[str, torch.Tensor]) -> None:
        """Copy ``state`` (own parameter names) in; wrappers of hub models map names first."""
        self.load_state_dict(state, strict=True)

    def check_pixels(self, pixels: np.ndarray) -> np.ndarray:
        """Reject non-canonical pixels with an error naming this encoder."""
        try:
            return require_canonical(pixels)
        except ValueError as error:
            raise EncoderError(self.name, str(error)) from error
