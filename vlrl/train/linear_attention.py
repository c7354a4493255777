"""Linear-attention layers (Qwen3.5's gated DeltaNet) over a packed window: the causal conv1d and
the recurrent state restart at every segment border, so a packed row gives each sequence what it
gets alone.

A DeltaNet layer mixes tokens only through a short causal convolution and a recurrent state
carried from token to token; run over a packed row as is, both would carry one sequence into the
next. Here the layer's own forward (transformers' torch path: ``torch_chunk_gated_delta_rule``)
runs once per contiguous segment of the window (``PackedMask.runs``, padding included), starting
from a zero state each time: exact, and what a varlen kernel (flash-linear-attention's
``cu_seqlens``) would compute in one call on a GPU. Under CP a segment is cut across ranks and
its state would have to pass from rank to rank; under TP the layer's heads would be split. Neither
is done yet, so the trainer refuses those layouts for a family with these layers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from vlrl.train.packed_attention import PackedMask


def linear_attention_layers(language_model: nn.Module) -> list[nn.Module]:
    """The decoder layers' linear-attention blocks (``layer.linear_attn``), in layer order."""
    return [layer.linear_attn for layer in language_model.layers if getattr(layer, "linear_attn", None) is not None]


def reset_at_segment_borders(language_model: nn.Module) -> int:
    """Make every linear-attention block of ``language_model`` run segment by segment on a
    ``PackedMask`` (in place: the blocks and their parameter names stay); returns how many."""
    blocks = linear_attention_layers(language_model)
    for block in blocks:
        block.forward = _per_segment(block.forward)
    return len(blocks)


def _per_segment(forward: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def run(hidden_states: torch.Tensor, attention_mask: PackedMask | None = None, **kwargs: Any) -> torch.Tensor:
        if not isinstance(attention_mask, PackedMask) or not attention_mask.runs:
            raise ValueError(
                "a linear-attention layer trains on a PackedMask whose segments are contiguous runs of one"
                f" window (no context parallelism); got {type(attention_mask).__name__}"
            )
        pieces = [forward(hidden_states[:, a:b], attention_mask=None, **kwargs) for a, b in attention_mask.runs]
        return torch.cat(pieces, dim=1)

    return run
