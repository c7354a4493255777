"""What the engine that records a mixture-of-experts model's routing and the trainer that replays it
must agree on: which blocks route, in which order, and how a record is stored.

A record holds, per token, the top-k expert ids of every sparse block in decoder-layer order
(``sparse_blocks``), each stored as id + 1 so that 0 means "no record" (``records.ROUTED_EXPERTS``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def is_sparse(block: nn.Module) -> bool:
    """Whether a decoder layer's MLP is a routed block (a router ``gate`` with ``top_k`` and its
    ``experts``), as transformers' Qwen3-VL-MoE block and the trainer's ``RoutedExperts`` are."""
    return hasattr(block, "experts") and hasattr(block, "gate") and hasattr(block.gate, "top_k")


def sparse_blocks(language_model: nn.Module) -> list[nn.Module]:
    """The routed blocks of ``language_model``'s decoder layers, in layer order (empty for a dense model)."""
    return [layer.mlp for layer in language_model.layers if is_sparse(layer.mlp)]


def record_dtype(num_experts: int) -> np.dtype:
    """The smallest dtype the store takes (``store.SUPPORTED_DTYPES``: no uint16) that holds every
    expert id + 1."""
    if num_experts < 2**8:
        return np.dtype(np.uint8)
    if num_experts < 2**15:
        return np.dtype(np.int16)
    raise ValueError(f"{num_experts} experts; a routing record holds at most {2**15 - 1}")


def encode(ids: torch.Tensor, num_experts: int) -> np.ndarray:
    """Expert ids ``(..., k)`` as a record: id + 1 in ``record_dtype``."""
    return (ids + 1).cpu().numpy().astype(record_dtype(num_experts))


def decode(record: torch.Tensor) -> torch.Tensor:
    """A record ``(..., k)`` as int64 expert ids, -1 where there is no record."""
    return record.long() - 1
