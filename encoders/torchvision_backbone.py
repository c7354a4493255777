"""A torchvision CNN, truncated, plus a linear projection: one token per final feature-map cell.

Any ``torchvision.models`` ResNet works (``resnet18`` by default, random weights: load your own
with ``load``); keeping only the first ``stages`` residual stages trades depth for resolution.
``num_tokens = (image_size / stride)^2`` with stride ``2^(stages + 1)``; cost is constant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import torch
from torch import nn
from torchvision.models import get_model

from encoders.fixed_size import FixedSizeEncoder
from vlrl.config import Ge, Le

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class TorchvisionEncoder(FixedSizeEncoder):
    """ResNet stem + ``stages`` residual stages -> 1x1 projection to ``hidden_size`` per cell."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Backbone and projection settings."""

        arch: str = "resnet18"
        """A ``torchvision.models`` ResNet name (``resnet18``, ``resnet50``, ...)."""
        stages: Annotated[int, Ge(1), Le(4)] = 4
        """Residual stages kept (``layer1`` .. ``layer<stages>``)."""
        image_size: Annotated[int, Ge(32)] = 224
        """Side every image is resized to."""
        hidden_size: Annotated[int, Ge(1)] = 1024
        """Width of the output rows."""

        def build(self) -> TorchvisionEncoder:
            return TorchvisionEncoder(self)

    name: ClassVar[str] = "torchvision"
    check_fields: ClassVar[Mapping[str, Any]] = dict(stages=1, image_size=32, hidden_size=16)

    def __init__(self, config: TorchvisionEncoder.Config) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        net = get_model(config.arch, weights=None)
        layers = [getattr(net, f"layer{i}") for i in range(1, config.stages + 1)]
        self.backbone = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool, *layers)
        channels = layers[-1][-1].conv1.in_channels  # a stage's last block takes its output width
        self.project = nn.Linear(channels, config.hidden_size)
        self.setup_fixed_size(config.image_size, IMAGENET_MEAN, IMAGENET_STD)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        features = self.backbone(images)  # (B, C, S / stride, S / stride)
        cells = features.flatten(2).transpose(1, 2)  # (B, cells, C), row-major over the map
        return self.project(cells).reshape(-1, self.hidden_size)
