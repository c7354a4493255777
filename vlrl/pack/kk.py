"""Karmarkar-Karp k-way partitioning: the balance reference the planner is held to, and its seed.

The largest differencing method (Karmarkar & Karp, 1982), in the k-way form verl uses in
``seqlen_balancing.py``. A *state* is a partial partition: k part sums, sorted descending, and
the items of each part. Every item starts as a state of its own (itself in one part, the other
k-1 empty); with ``equal_size``, each run of k consecutive items of the sorted list is one state
instead, one item per part, so every part ends with n/k items. Then, while more than one state
is left, the two states with the largest *spread* (max part sum - min part sum) are merged by
pairing the largest part of one with the smallest part of the other, part by part, so their
differences cancel rather than add. After n-1 merges the last state is the partition.

Parts are linked lists over the items (``nxt``/``tail``) so a merge joins two parts in O(1);
a merge costs O(k log k) and the whole run O(n log n + n k log k). Lone items wait in a sorted
list beside the heap, and adding one to a state only re-inserts the state's smallest part.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections.abc import Sequence

import numpy as np


def karmarkar_karp(costs: Sequence[float] | np.ndarray, k: int, *, equal_size: bool = False) -> list[list[int]]:
    """Indices of ``costs`` split into ``k`` parts whose sums are nearly equal (parts may be empty
    when there are fewer items than parts; with ``equal_size`` every part gets ``len(costs) / k``)."""
    values = np.asarray(costs, dtype=np.float64)
    n = len(values)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k={k!r}; expected an int >= 1 parts")
    if equal_size and n % k:
        raise ValueError(f"equal_size needs the item count ({n}) to be a multiple of k={k}")
    if n == 0 or k == 1:
        return [list(range(n))] + [[] for _ in range(k - 1)]
    order = np.argsort(values, kind="stable").tolist()
    value = values.tolist()
    nxt = [-1] * n  # next item in the same part; -1 ends it
    tail = list(range(n))  # last item of the part whose first item is the index

    def join(a: int, b: int) -> int:
        """One part of parts ``a`` and ``b`` (first items; -1 is an empty part)."""
        if a < 0:
            return b
        if b >= 0:
            nxt[tail[a]] = b
            tail[a] = tail[b]
        return a

    # Lone items (states of one item) wait in a list, largest first, and only merged states go
    # into the heap: most merges add one lone item to a state, and this keeps them off the heap.
    # Heap entries: (-spread, ticket, part sums ascending, first item of each part).
    lone = [] if equal_size else order[::-1]
    next_lone = 0
    ticket = itertools.count()  # tie-break: equal spreads merge in arrival order
    heap: list[tuple[float, int, tuple[float, ...], tuple[int, ...]]] = []
    if equal_size:
        for start in range(0, n, k):
            group = order[start : start + k]  # ascending: one item per part
            sums = tuple(value[i] for i in group)
            heap.append((sums[0] - sums[-1], next(ticket), sums, tuple(group)))
        heapq.heapify(heap)

    def pop() -> tuple[tuple[float, ...] | None, tuple[int, ...] | int]:
        """The state of largest spread: (sums, heads), or (None, item) for a lone item."""
        nonlocal next_lone
        if next_lone < len(lone) and (not heap or -value[lone[next_lone]] <= heap[0][0]):
            next_lone += 1
            return None, lone[next_lone - 1]
        _, _, sums, heads = heapq.heappop(heap)
        return sums, heads

    zeros, empties = (0.0,) * (k - 2), (-1,) * (k - 2)
    while len(lone) - next_lone + len(heap) > 1:
        sums0, heads0 = pop()
        sums1, heads1 = pop()
        if sums0 is None and sums1 is None:  # two lone items, the larger first
            sums, heads = (*zeros, value[heads1], value[heads0]), (*empties, heads1, heads0)
        elif sums0 is None or sums1 is None:  # a lone item joins the smallest part of a state
            if sums0 is None:
                sums0, heads0, heads1 = sums1, heads1, heads0
            item_sum = sums0[0] + value[heads1]
            at = bisect.bisect_left(sums0, item_sum, 1)
            sums = (*sums0[1:at], item_sum, *sums0[at:])
            heads = (*heads0[1:at], join(heads0[0], heads1), *heads0[at:])
        else:  # largest part of one with the smallest of the other, part by part
            merged = sorted(zip(map(operator.add, sums0[::-1], sums1), map(join, heads0[::-1], heads1)))
            sums, heads = zip(*merged)
        heapq.heappush(heap, (sums[0] - sums[-1], next(ticket), sums, heads))

    sums, heads = pop()
    if sums is None:  # a single item
        heads = (*(-1,) * (k - 1), heads)
    parts = []
    for head in heads:
        part = []
        while head >= 0:
            part.append(head)
            head = nxt[head]
        parts.append(part)
    return parts[::-1]  # largest part first
