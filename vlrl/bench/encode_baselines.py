"""The encode benchmark's baseline assignments of images to ranks, and the best one possible.

``contiguous_ranks`` is Vision-DP's split (verl PR #5230 / AReaL PR #929), ``lpt_ranks`` vLLM's
encoder DP; both are given the planner's cost function (verl and vLLM balance patch counts, which
ignore attention's quadratic term). ``optimal_imbalance`` tries every assignment of a small step;
``over_lower_bound`` compares any assignment with what no assignment can beat.
"""

from __future__ import annotations

import numpy as np


def contiguous_ranks(costs: np.ndarray, k: int) -> np.ndarray:
    """verl's Vision-DP split of ``costs`` in order into ``k`` contiguous runs: each rank takes
    images until its load reaches the remaining cost over the remaining ranks, leaving at least
    one image for each rank after it."""
    ranks = np.full(len(costs), k - 1, dtype=np.int64)
    remaining, i = float(costs.sum()), 0
    for rank in range(k):
        if i >= len(costs):
            break
        target = remaining / (k - rank)
        most = len(costs) - i - (k - rank - 1)
        load, taken = 0.0, 0
        while i < len(costs) and taken < most:
            ranks[i] = rank
            load += costs[i]
            i, taken = i + 1, taken + 1
            if load >= target:
                break
        remaining -= load
    return ranks


def lpt_ranks(costs: np.ndarray, k: int) -> np.ndarray:
    """vLLM's encoder-DP assignment: costliest first, each onto the least loaded rank (ties: lower rank)."""
    ranks = np.empty(len(costs), dtype=np.int64)
    loads = np.zeros(k)
    for i in np.argsort(-costs, kind="stable"):
        ranks[i] = int(np.argmin(loads))
        loads[ranks[i]] += costs[i]
    return ranks


def optimal_imbalance(costs: np.ndarray, k: int, limit: int = 1 << 20) -> float | None:
    """The best ``max / mean`` load of any assignment of ``costs`` to ``k`` ranks, by trying them
    all (the first image on rank 0: ranks are interchangeable); None past ``limit`` assignments."""
    n = len(costs)
    if n == 0 or k ** (n - 1) > limit:
        return None
    rest = np.indices((k,) * (n - 1)).reshape(n - 1, -1)  # (n - 1, k**(n-1)): ranks of images 1..n-1
    loads = np.zeros((rest.shape[1], k))  # (assignments, k)
    loads[:, 0] = costs[0]
    for j in range(1, n):
        np.add.at(loads, (np.arange(rest.shape[1]), rest[j - 1]), costs[j])
    return float(loads.max(axis=1).min() / (costs.sum() / k))


def imbalance(loads: np.ndarray) -> float:
    """The costliest rank's load over the mean rank's (1 with no load)."""
    mean = float(loads.mean())
    return float(loads.max()) / mean if mean > 0 else 1.0


def over_lower_bound(loads: np.ndarray, costs: np.ndarray) -> float:
    """The costliest rank's load over the lower bound of any assignment of ``costs`` to
    ``len(loads)`` ranks, ``max(largest item, total / ranks)`` (1 with no load)."""
    bound = max(float(np.max(costs, initial=0.0)), float(np.sum(costs)) / len(loads))
    return float(np.max(loads)) / bound if bound > 0 else 1.0
