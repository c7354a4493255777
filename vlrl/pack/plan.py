"""``Plan``: which sequences each DP rank trains in each micro-batch, and where they sit.

A micro-batch packs whole sequences end to end (no padding between them; attention is masked
per segment), so sequence ``j`` occupies ``[offsets[j], offsets[j] + lengths[j])`` of the packed
micro-batch. With a ``Layout`` that is enough to tell every CP rank which token ranges of which
stored rows make up its window (``cp_ranges``), without reading a row.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from vlrl.pack.layout import Layout


class RowRange(NamedTuple):
    """Tokens ``[start, stop)`` of the stored (unpadded) row ``key``, landing at ``window_start``
    of the CP rank's window (its chunks concatenated in order)."""

    key: str
    start: int
    stop: int
    window_start: int


@dataclass(frozen=True, slots=True)
class MicroBatch:
    keys: tuple[str, ...]
    """Store keys of the packed sequences, in packing order."""
    lengths: tuple[int, ...]
    """Tokens of each sequence."""
    cost: float
    """Cost-model sum over the sequences (each its own attention segment)."""
    offsets: tuple[int, ...] = field(init=False)
    """Where each sequence starts in the packed micro-batch."""
    num_tokens: int = field(init=False)
    """Packed length before layout padding."""

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.lengths):
            raise ValueError(f"MicroBatch has {len(self.keys)} keys and {len(self.lengths)} lengths; expected one each")
        if any(n < 1 for n in self.lengths):
            raise ValueError(f"MicroBatch.lengths={self.lengths}; expected every sequence to have >= 1 token")
        ends = tuple(itertools.accumulate(self.lengths))
        object.__setattr__(self, "offsets", (0, *ends[:-1]) if ends else ())
        object.__setattr__(self, "num_tokens", ends[-1] if ends else 0)

    def cp_ranges(self, cp_rank: int, layout: Layout) -> list[RowRange]:
        """The row ranges that make up CP rank ``cp_rank``'s window, in window order. Their
        lengths sum to the window minus ``layout.cp_pad(num_tokens, cp_rank)`` pad positions,
        which always come last."""
        ranges = []
        window_start = 0
        for start, stop in layout.cp_window(self.num_tokens, cp_rank):
            # from the sequence holding `start` to the last that starts before `stop`
            j = max(bisect.bisect_right(self.offsets, start) - 1, 0)
            while j < len(self.keys) and self.offsets[j] < stop:
                lo = max(start, self.offsets[j])
                hi = min(stop, self.offsets[j] + self.lengths[j])
                if hi > lo:  # empty when the chunk lies in the padding after the last sequence
                    offset = self.offsets[j]
                    ranges.append(RowRange(self.keys[j], lo - offset, hi - offset, window_start + lo - start))
                j += 1
            window_start += stop - start
        return ranges


@dataclass(frozen=True, slots=True)
class Plan:
    ranks: tuple[tuple[MicroBatch, ...], ...]
    """``ranks[dp_rank][i]``: the i-th micro-batch of a DP rank. Every rank has the same count
    (ranks step together); each rank's micro-batches are ordered costliest first."""

    def __post_init__(self) -> None:
        counts = [len(batches) for batches in self.ranks]
        if len(set(counts)) != 1:  # also no ranks at all
            raise ValueError(f"Plan has micro-batch counts {counts} per DP rank; expected one count")

    @property
    def dp(self) -> int:
        return len(self.ranks)

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches of every DP rank."""
        return len(self.ranks[0])

    def rank_costs(self) -> np.ndarray:
        """``(dp,)`` total cost of each DP rank."""
        return np.array([sum(mb.cost for mb in batches) for batches in self.ranks], dtype=np.float64)

    def imbalance(self) -> float:
        """Costliest rank over the mean rank: 1.0 is perfect; the step waits on the costliest."""
        return imbalance(self.rank_costs())

    def cp_ranges(self, dp_rank: int, micro_batch: int, cp_rank: int, layout: Layout) -> list[RowRange]:
        """``MicroBatch.cp_ranges`` of DP rank ``dp_rank``'s micro-batch ``micro_batch``."""
        if layout.dp != self.dp:
            raise ValueError(f"layout has dp={layout.dp} but the plan was made for dp={self.dp}")
        if not (0 <= dp_rank < self.dp and 0 <= micro_batch < self.num_micro_batches):
            raise ValueError(
                f"no micro-batch {micro_batch} of dp rank {dp_rank}; the plan has {self.num_micro_batches}"
                f" micro-batches for each of {self.dp} ranks"
            )
        return self.ranks[dp_rank][micro_batch].cp_ranges(cp_rank, layout)


def imbalance(rank_costs: np.ndarray) -> float:
    """``max / mean`` of per-rank costs; 1.0 when there is no cost at all."""
    mean = float(np.mean(rank_costs))
    return float(np.max(rank_costs)) / mean if mean > 0 else 1.0
