"""``CostModel``: the training cost of a sequence from its length alone (metadata, no tensor).

    cost(L) = linear * L + quadratic * L**2

The unit is one token through the dense layers (``linear = 1``). A dense transformer's forward
spends about ``2 * N`` FLOPs per token in its weights (N parameters) and, under a causal mask,
``2 * n_layers * d_model * L**2`` FLOPs on attention scores and values of an L-token sequence
(``QK^T`` and ``AV``, each ``L**2 * d_model`` multiply-adds halved by the mask). In token units
the attention term is therefore ``quadratic = n_layers * d_model / N``: 32 * 4096 / 6.7e9
~ 2e-5 for a 7B model, so a 32k-token trajectory costs about 1.6x its length.

A packed micro-batch costs the sum over its sequences: attention never crosses a segment
boundary, so each sequence pays the quadratic term of its own length, not of the pack's.
Vision encoding is not in here: the encoder planner balances image items across ranks on its
own, independently of where their tokens land.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from vlrl.config import ConfigError, Ge


class CostModel:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Cost of a sequence as a function of its length, in units of one token through the dense layers."""

        linear: Annotated[float, Ge(0)] = 1.0
        """Cost per token (dense layers: projections and MLP)."""

        quadratic: Annotated[float, Ge(0)] = 2e-5
        """Cost per squared token of one sequence (causal attention); n_layers * d_model / params."""

        def check(self) -> None:
            if self.linear == 0 and self.quadratic == 0:
                raise ConfigError("quadratic", self.quadratic, "linear or quadratic > 0, or every sequence is free")

        def build(self) -> CostModel:
            return CostModel(self)

    def __init__(self, config: CostModel.Config) -> None:
        config.check()
        self.linear = float(config.linear)
        self.quadratic = float(config.quadratic)

    def sequence_costs(self, num_tokens: np.ndarray) -> np.ndarray:
        """Cost of each sequence, ``(n,)`` lengths -> ``(n,)`` float64 costs."""
        length = np.asarray(num_tokens, dtype=np.float64)  # float: L**2 overflows int32 at 46k tokens
        return self.linear * length + self.quadratic * length * length
