"""A benchmark rank's real encoder invocations: calls, images, rows and forward seconds.

Forward hooks on the encoder module count every ``encoder(batch)`` whoever makes it (``StepEncoder``
or a baseline), so the schemes are counted alike: images are the batch's ``grid_thw`` rows, rows
the output's, seconds the forward's wall time on this rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(slots=True)
class EncoderCalls:
    calls: int = 0
    images: int = 0
    rows: int = 0
    seconds: float = 0.0


class EncoderMeter:
    """Counts the forwards of ``encoder`` into the record the last ``start()`` returned."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        self._current = EncoderCalls()
        self._began = 0.0
        encoder.register_forward_pre_hook(self._before)
        encoder.register_forward_hook(self._after)

    def start(self) -> EncoderCalls:
        """A fresh record that the following forwards add to."""
        self._current = EncoderCalls()
        return self._current

    def _before(self, module, args) -> None:
        self._began = time.perf_counter()

    def _after(self, module, args, output: torch.Tensor) -> None:
        calls = self._current
        calls.seconds += time.perf_counter() - self._began
        calls.calls += 1
        calls.images += int(args[0].grid_thw.shape[0])  # (images, 3)
        calls.rows += int(output.shape[0])
