"""Split sequence costs over DP ranks: a Karmarkar-Karp partition, then local refinement.

Refinement repeatedly lowers the costliest rank ``A`` against a cheaper rank ``B`` (cheapest
first) with the single best move or swap between the two. With ``diff = T[A] - T[B] > 0``,
moving an item of cost ``x`` from A to B, or swapping ``a`` in A for ``b`` in B with
``x = a - b``, leaves the pair at ``max(T[A] - x, T[B] + x)``; that is below ``T[A]`` exactly
when ``0 < x < diff``, and lowest when ``x`` is nearest ``diff / 2``. The gain
``min(x, diff - x)`` is found with binary search over each rank's sorted costs (swaps:
for every ``a``, the ``b`` nearest ``a - diff / 2``), vectorised over A.

A step never raises the costliest rank and strictly lowers the sorted vector of rank costs, so
refinement only improves on its seed: the result is at least as balanced as Karmarkar-Karp.
"""

from __future__ import annotations

import numpy as np

from vlrl.pack.kk import karmarkar_karp

_REL_TOL = 1e-12
"""Gains below this fraction of the mean rank cost are float noise, not improvement."""


def balance(costs: np.ndarray, k: int, refine_steps: int) -> list[np.ndarray]:
    """Indices of ``costs`` ``(n,)`` split over ``k`` ranks with near-equal cost sums."""
    costs = np.asarray(costs, dtype=np.float64)
    parts = [np.asarray(part, dtype=np.int64) for part in karmarkar_karp(costs, k)]
    if k == 1 or refine_steps == 0:
        return parts
    # Per rank: item indices sorted by cost, their costs, and the total.
    items = [part[np.argsort(costs[part], kind="stable")] for part in parts]
    sorted_costs = [costs[part] for part in items]
    totals = np.array([c.sum() for c in sorted_costs])
    tol = _REL_TOL * max(totals.mean(), np.finfo(np.float64).tiny)
    for _ in range(refine_steps):
        if not _improve(items, sorted_costs, totals, costs, tol):
            break
    return items


def _improve(
    items: list[np.ndarray], sorted_costs: list[np.ndarray], totals: np.ndarray, costs: np.ndarray, tol: float
) -> bool:
    """Apply the best move or swap between the costliest rank and the cheapest rank that has one."""
    a = int(np.argmax(totals))
    for b in np.argsort(totals, kind="stable").tolist():
        diff = totals[a] - totals[b]
        if diff <= tol:  # this rank, and every later one, costs as much as A: nothing to gain
            return False
        gain, take, give = _best_exchange(sorted_costs[a], sorted_costs[b], diff)
        if gain > tol:
            _exchange(items, sorted_costs, totals, costs, a, b, take, give)
            return True
    return False


def _best_exchange(cost_a: np.ndarray, cost_b: np.ndarray, diff: float) -> tuple[float, int, int]:
    """(gain, position in A, position in B or -1 for a move) of the best move or swap from A to B."""
    half = diff / 2
    best = (0.0, -1, -1)
    if len(cost_a) == 0:
        return best
    # Move: the item of A nearest diff / 2.
    at = np.clip(np.searchsorted(cost_a, half) + np.array([-1, 0]), 0, len(cost_a) - 1)
    gains = np.minimum(cost_a[at], diff - cost_a[at])
    i = int(np.argmax(gains))
    if gains[i] > best[0]:
        best = (float(gains[i]), int(at[i]), -1)
    if len(cost_b) == 0:
        return best
    # Swap: for each a, the b nearest a - diff / 2 (the two neighbours of the insertion point).
    right = np.searchsorted(cost_b, cost_a - half)
    for near in (np.clip(right - 1, 0, len(cost_b) - 1), np.clip(right, 0, len(cost_b) - 1)):
        x = cost_a - cost_b[near]
        gains = np.minimum(x, diff - x)  # (len(A),); <= 0 where the swap does not help
        i = int(np.argmax(gains))
        if gains[i] > best[0]:
            best = (float(gains[i]), i, int(near[i]))
    return best


def _exchange(
    items: list[np.ndarray],
    sorted_costs: list[np.ndarray],
    totals: np.ndarray,
    costs: np.ndarray,
    a: int,
    b: int,
    take: int,
    give: int,
) -> None:
    """Move the item at position ``take`` of rank A to B and, unless ``give`` is -1, the one at
    position ``give`` of B to A; both sorted orders and totals stay exact."""
    leaving = [(a, b, take)] + ([(b, a, give)] if give >= 0 else [])
    arriving = [(dst, items[src][at]) for src, dst, at in leaving]
    for src, _, at in leaving:
        items[src] = np.delete(items[src], at)
        sorted_costs[src] = np.delete(sorted_costs[src], at)
    for dst, item in arriving:
        into = int(np.searchsorted(sorted_costs[dst], costs[item]))
        items[dst] = np.insert(items[dst], into, item)
        sorted_costs[dst] = np.insert(sorted_costs[dst], into, costs[item])
    for rank in (a, b):
        totals[rank] = sorted_costs[rank].sum()
