"""``MicroBatchPlanner``: a step's sequences -> micro-batches per DP rank, from metadata alone.

1. **Cost** every sequence with the ``CostModel`` (``linear * L + quadratic * L**2``).
2. **Balance** sequences over the DP ranks: Karmarkar-Karp, refined by moves and swaps
   (``balance``). A rank's cost is the sum of its sequences' costs however they are packed
   (attention never crosses sequences), so balance is settled here, never undone below.
3. **Pack** each rank's sequences into micro-batches of at most ``max_tokens_per_micro_batch``
   tokens by best-fit decreasing: longest first, each into the fullest micro-batch it still
   fits (at most 11/9 of the optimal count + 1, like first-fit decreasing).
4. **Equalise** the counts: ranks step together, so each gets ``m`` = the largest count. A rank
   short of ``m`` splits its costliest micro-batch of two or more sequences into two halves of
   near-equal cost until it has ``m``; only a rank with fewer than ``m`` sequences (say, fewer
   sequences than ranks) is padded with empty micro-batches, which the trainer steps through
   with no tokens.
5. **Order** each rank's micro-batches costliest first, so the i-th micro-batches of all ranks
   are alike and ranks wait less for each other at every micro-batch's collectives.

The budget counts real tokens: ``Layout`` padding adds fewer than ``layout.pad_multiple``.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Protocol

import numpy as np

from vlrl.config import Ge
from vlrl.pack.balance import balance
from vlrl.pack.cost import CostModel
from vlrl.pack.plan import MicroBatch, Plan


class PlanItem(Protocol):
    """What the planner reads of a sequence: ``SeqMeta`` or any record with these two fields."""

    @property
    def key(self) -> str: ...

    @property
    def num_tokens(self) -> int: ...


class MicroBatchPlanner:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Packs a step's sequences into the same number of micro-batches per DP rank, balancing cost."""

        max_tokens_per_micro_batch: Annotated[int, Ge(1)] = 65536
        """Most real tokens one packed micro-batch may hold; a longer sequence is an error."""

        cost: CostModel.Config = field(default_factory=CostModel.Config)
        """Cost of a sequence from its length: what the ranks are balanced on."""

        refine_steps: Annotated[int, Ge(0)] = 64
        """Most move/swap steps that improve the Karmarkar-Karp split of ranks; 0 keeps it as is."""

        def build(self) -> MicroBatchPlanner:
            return MicroBatchPlanner(self)

    def __init__(self, config: MicroBatchPlanner.Config) -> None:
        self.config = config
        self.cost_model = config.cost.build()

    def plan(self, seqs: Sequence[PlanItem], dp: int) -> Plan:
        """Micro-batches for ``dp`` ranks holding every sequence of ``seqs`` exactly once."""
        return self.plan_lengths([s.key for s in seqs], [s.num_tokens for s in seqs], dp)

    def plan_lengths(self, keys: Sequence[str], num_tokens: Sequence[int] | np.ndarray, dp: int) -> Plan:
        """``plan`` on a columnar view: ``keys[i]`` has ``num_tokens[i]`` tokens."""
        lengths = self._check(keys, num_tokens, dp)
        costs = self.cost_model.sequence_costs(lengths)  # (n,)
        length_of, cost_of = lengths.tolist(), costs.tolist()
        ranks = []
        for part in balance(costs, dp, self.config.refine_steps):
            order = part[np.argsort(-lengths[part], kind="stable")]  # longest first
            ranks.append(_best_fit_decreasing(order.tolist(), length_of, self.config.max_tokens_per_micro_batch))
        m = max(len(bins) for bins in ranks)
        plan = []
        for bins in ranks:
            batches = [
                MicroBatch(
                    keys=tuple(map(keys.__getitem__, b)),
                    lengths=tuple(map(length_of.__getitem__, b)),
                    cost=math.fsum(map(cost_of.__getitem__, b)),
                )
                for b in _split_to(m, bins, cost_of)
            ]
            batches.sort(key=lambda mb: -mb.cost)
            plan.append(tuple(batches))
        return Plan(tuple(plan))

    def _check(self, keys: Sequence[str], num_tokens: Sequence[int] | np.ndarray, dp: int) -> np.ndarray:
        """``num_tokens`` as an ``(n,)`` int64 array, after the checks that make a plan possible."""
        if not isinstance(dp, int) or isinstance(dp, bool) or dp < 1:
            raise ValueError(f"dp={dp!r}; expected an int >= 1 data-parallel ranks")
        lengths = np.asarray(num_tokens)
        if lengths.ndim != 1 or len(lengths) != len(keys):
            raise ValueError(
                f"got {len(keys)} keys and num_tokens of shape {lengths.shape}; expected one length per key"
            )
        if len(lengths) and not np.issubdtype(lengths.dtype, np.integer):
            raise ValueError(f"num_tokens has dtype {lengths.dtype}; expected integer token counts")
        lengths = lengths.astype(np.int64)
        budget = self.config.max_tokens_per_micro_batch
        for bad, rule in ((lengths < 1, ">= 1 token"), (lengths > budget, f"<= max_tokens_per_micro_batch={budget}")):
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"sequence {keys[i]!r} has {lengths[i]} tokens; expected {rule}")
        seen: set[str] = set()
        for key in keys:
            if key in seen:
                raise ValueError(f"sequence key {key!r} appears more than once; every sequence trains exactly once")
            seen.add(key)
        return lengths


def _best_fit_decreasing(order: list[int], length_of: list[int], budget: int) -> list[list[int]]:
    """Items of ``order`` (longest first) packed into bins of at most ``budget`` tokens."""
    bins: list[list[int]] = []
    # Open bins as `tokens_left << 32 | bin`, ascending: bisect finds the tightest fit.
    free: list[int] = []
    for i in order:
        n = length_of[i]
        at = bisect.bisect_left(free, n << 32)
        if at == len(free):
            bins.append([i])
            left, b = budget - n, len(bins) - 1
        else:
            entry = free.pop(at)
            left, b = (entry >> 32) - n, entry & 0xFFFFFFFF
            bins[b].append(i)
        if left > 0:  # a full bin takes nothing more (every sequence has >= 1 token)
            bisect.insort(free, left << 32 | b)
    return bins


def _split_to(m: int, bins: list[list[int]], cost_of: list[float]) -> list[list[int]]:
    """``bins`` grown to ``m`` by halving the costliest splittable bin; empty bins once none is left."""
    bins = list(bins)
    splittable = [(-sum(cost_of[i] for i in b), j) for j, b in enumerate(bins) if len(b) > 1]
    heapq.heapify(splittable)
    while len(bins) < m and splittable:
        _, j = heapq.heappop(splittable)
        halves: tuple[list[int], list[int]] = ([], [])
        sums = [0.0, 0.0]
        for i in sorted(bins[j], key=lambda i: -cost_of[i]):  # costliest first, into the lighter half
            lighter = int(sums[1] < sums[0])
            halves[lighter].append(i)
            sums[lighter] += cost_of[i]
        bins[j] = halves[0]
        bins.append(halves[1])
        for k, half in ((j, halves[0]), (len(bins) - 1, halves[1])):
            if len(half) > 1:
                heapq.heappush(splittable, (-sum(cost_of[i] for i in half), k))
    return bins + [[] for _ in range(m - len(bins))]
