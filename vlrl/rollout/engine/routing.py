"""Recording a mixture-of-experts model's routing as the engine runs it (``record_routing``).

A forward hook on each sparse block's router keeps the expert ids of the block's last call; after
each forward of a batch the runner takes them, one ``(B, N, layers, k)`` array, and hands every
row its own tokens' part. The routing of a token is that of the forward which fed it to the
model: a prompt token's is the prefill's, a sampled token's the next decode step's, so a turn's
last sampled token gets none from its own request (the next turn's prefill gives it one).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from vlrl.models.routing import encode, sparse_blocks


class RoutingRecorder:
    def __init__(self, language_model: nn.Module) -> None:
        blocks = sparse_blocks(language_model)
        if not blocks:
            raise ValueError("record_routing: the model has no mixture-of-experts layers to record")
        self.num_experts = int(blocks[0].gate.num_experts)
        self.top_k = int(blocks[0].gate.top_k)
        self._last: list[torch.Tensor | None] = [None] * len(blocks)
        for index, block in enumerate(blocks):
            block.gate.register_forward_hook(self._keeper(index))

    def _keeper(self, index: int):
        def keep(module: nn.Module, args: tuple, output: tuple[torch.Tensor, ...]) -> None:
            self._last[index] = output[-1]  # the router returns (logits, weights, expert ids (tokens, k))

        return keep

    def take(self, batch: int) -> np.ndarray:
        """The last forward's routing as records, ``(batch, tokens, layers, k)``."""
        ids = torch.stack(self._last, dim=1)  # (batch * tokens, layers, k)
        return encode(ids, self.num_experts).reshape(batch, -1, len(self._last), self.top_k)
