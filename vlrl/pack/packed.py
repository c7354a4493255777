"""``PackedWindow``: one CP rank's window of a packed micro-batch, as the trainer consumes it.

A window holds ``Layout.window_len`` tokens: the CP rank's chunks of the packed micro-batch
(whole sequences end to end) concatenated in order, real tokens first and padding last. Every
per-token array has that length on axis 0 (an ``extra/...`` field may add axes). Padding trains
nothing and attends to nothing real:

===============================================  ==================
array                                            pad value
===============================================  ==================
payload fields (``token_ids``, ``loss_mask``...)  ``records.pad_value`` (0, False)
``segment_ids``                                  ``PAD_SEGMENT_ID`` (-1)
``position_ids``                                 0
===============================================  ==================

A payload field's array has the field's name (``records.FIELDS``). Which fields a window has is
the packer caller's choice, by what its loss needs: the warm start's likelihood needs no
``logprobs`` or ``advantages``, and then they are None.

``segment_ids`` is the index of the token's sequence in the micro-batch, the same on every CP
rank, so attention is masked to equal segment ids across CP ranks too. ``cu_seqlens`` cuts the
window into *pieces* for varlen kernels: runs of one sequence that are contiguous in the packed
micro-batch (a sequence crossing the border of the rank's two chunks is two pieces) and, last,
the pad tail. ``position_ids`` is each token's position in its own sequence: the 1-D RoPE
positions; the 3-D M-RoPE positions of image tokens are the trainer's, from ``images``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from vlrl.pack.layout import Layout
from vlrl.records import ADVANTAGES, EXTRA_PREFIX, LOGPROBS, LOSS_MASK, TEACHER_LOGPROBS, TOKEN_IDS, pad_value

PAD_TOKEN_ID = pad_value(TOKEN_IDS)
PAD_SEGMENT_ID = -1

_ARRAYS = (TOKEN_IDS, "position_ids", "segment_ids", "cu_seqlens", LOSS_MASK, LOGPROBS, ADVANTAGES, TEACHER_LOGPROBS)
"""The window's named arrays (the payload fields among them are optional but ``token_ids`` and
``loss_mask``); ``extra/...`` fields are in ``extras``."""


class ImagePlacement(NamedTuple):
    """Embedding rows ``[row_start, row_start + num_rows)`` of one image occurrence sit at window
    positions ``[window_start, window_start + num_rows)``. An image cut by a chunk border or a
    window's end has one placement per piece, in each window holding part of it."""

    seq_key: str
    """Store key of the sequence the image occurs in."""
    occurrence: int
    """Index into that sequence's ``SeqMeta.image_offsets``."""
    image_key: str
    """Store key of the image's pixels (``MMItemMeta.store_key``): the encoder's item."""
    window_start: int
    row_start: int
    num_rows: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PackedWindow:
    num_tokens: int
    """Real tokens; positions ``[num_tokens, len(self))`` are padding."""
    token_ids: np.ndarray  # (W,)
    position_ids: np.ndarray  # (W,) int32
    segment_ids: np.ndarray  # (W,) int32
    cu_seqlens: np.ndarray  # (pieces + 1,) int32, from 0 to W
    loss_mask: np.ndarray  # (W,) bool
    logprobs: np.ndarray | None = None  # (W,) the sampling policy's, for the policy gradient
    advantages: np.ndarray | None = None  # (W,) for the policy gradient
    teacher_logprobs: np.ndarray | None = None  # (W,) for the distillation term
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)
    """``extra/...`` fields by their store name, each ``(W, ...)``."""
    images: tuple[ImagePlacement, ...] = ()
    """Image token runs the window holds, in window order."""

    def __len__(self) -> int:
        return len(self.token_ids)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array by name (optional fields only when present): what shared memory holds."""
        out = {name: getattr(self, name) for name in _ARRAYS}
        return {name: array for name, array in {**out, **self.extras}.items() if array is not None}

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, np.ndarray], *, num_tokens: int, images: tuple[ImagePlacement, ...]
    ) -> PackedWindow:
        """The inverse of ``arrays``."""
        extras = {name: array for name, array in arrays.items() if name.startswith(EXTRA_PREFIX)}
        named = {name: array for name, array in arrays.items() if name not in extras}
        return cls(num_tokens=num_tokens, extras=extras, images=images, **named)

    def tp_shard(self, layout: Layout, tp_rank: int) -> PackedWindow:
        """TP rank ``tp_rank``'s contiguous share of the window under sequence parallelism (the
        whole window without it): views, not copies, with pieces and images clipped to the shard."""
        start, stop = layout.tp_shard(len(self), tp_rank)
        if (start, stop) == (0, len(self)):
            return self
        inner = self.cu_seqlens[(self.cu_seqlens > start) & (self.cu_seqlens < stop)] - start
        images = []
        for image in self.images:
            lo, hi = max(image.window_start, start), min(image.window_start + image.num_rows, stop)
            if hi > lo:
                row = image.row_start + lo - image.window_start
                images.append(image._replace(window_start=lo - start, row_start=row, num_rows=hi - lo))
        cut = {name: array[start:stop] for name, array in self.arrays().items() if name != "cu_seqlens"}
        cut["cu_seqlens"] = np.concatenate([[0], inner, [stop - start]]).astype(np.int32)
        return PackedWindow.from_arrays(
            cut, num_tokens=min(max(self.num_tokens - start, 0), stop - start), images=tuple(images)
        )
