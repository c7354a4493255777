"""Length penalties on metadata: DAPO's overlong soft penalty on the response length.

For a response of ``L`` generated tokens (``SeqMeta.num_response_tokens``, every turn together),
a length limit ``Lmax`` and a buffer ``B`` before it::

    p(L) =  0                     if L <= Lmax - B
            (Lmax - B - L) / B    if Lmax - B < L <= Lmax     (falls linearly from 0 to -1)
            -1                    if L > Lmax

and the reward becomes ``r + factor * p(L)``. The ramp tells the policy that it is getting long
before the hard limit truncates it; ``B = 0`` makes it a hard step at ``Lmax``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from vlrl.config import ConfigError, Ge
from vlrl.records import SeqMeta


class OverlongPenalty:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """DAPO's overlong soft penalty, added to each sequence's reward."""

        max_response_tokens: Annotated[int, Ge(1)] = 4096
        """``Lmax``: response length (generated tokens, all turns) from which the full penalty applies."""

        buffer_tokens: Annotated[int, Ge(0)] = 512
        """``B``: length of the linear ramp that ends at ``Lmax``; 0 for a hard step."""

        factor: Annotated[float, Ge(0)] = 1.0
        """Scale of the penalty: the largest amount subtracted from a reward."""

        def check(self) -> None:
            if self.buffer_tokens > self.max_response_tokens:
                raise ConfigError(
                    "buffer_tokens", self.buffer_tokens, f"an integer <= max_response_tokens={self.max_response_tokens}"
                )

        def build(self) -> OverlongPenalty:
            return OverlongPenalty(self)

    def __init__(self, config: OverlongPenalty.Config) -> None:
        self.config = config

    def penalty(self, length: int) -> float:
        """``factor * p(L)``, in ``[-factor, 0]``."""
        limit, buffer = self.config.max_response_tokens, self.config.buffer_tokens
        if length <= limit - buffer:
            return 0.0
        if length <= limit:  # here buffer > 0: with B = 0 the first case covers every L <= Lmax
            return self.config.factor * (limit - buffer - length) / buffer
        return -self.config.factor

    def apply(self, metas: Sequence[SeqMeta]) -> np.ndarray:
        """Penalised rewards ``r_i + factor * p(L_i)``, ``(n,)`` float64."""
        rewards = np.array([m.reward for m in metas], dtype=np.float64)  # (n,)
        return rewards + np.array([self.penalty(m.num_response_tokens) for m in metas], dtype=np.float64)
