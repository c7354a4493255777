"""verl's Karmarkar-Karp: a balance reference for ``vlrl bench pack`` written outside vlrl.

``vlrl.pack.kk`` is the planner's own seed, so "the planner is no worse than KK" cannot fail
against it. verl's ``get_seqlen_balanced_partitions`` (``verl.utils.seqlen_balancing``, what
verl balances DP ranks and dynamic micro-batches with) is someone else's implementation of the
same largest-differencing method, run as verl ships it. Called with ``equal_size=False``: the
planner does not force equal sequence counts per rank either, and the constraint only costs
balance.

verl takes integer sequence lengths, so the planner's float costs go in scaled by ``SCALE`` and
rounded (relative error < 1e-9 for costs >= 1k); the imbalance is recomputed from the real float
costs of the partition it returns.

verl is installed for the bench only, without its dependencies (``INSTALL``, as
``scripts/setup.sh`` does); importing it loads its package (torch, tensordict and ray, all in
vlrl's dev extras) and sets up root logging if nothing has.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

INSTALL = "pip install --no-deps verl==0.9.1"
SCALE = 2**20


def load() -> Callable[..., list[list[int]]]:
    """verl's ``get_seqlen_balanced_partitions``, or an error that says how to install verl."""
    try:
        from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions
    except ImportError as error:
        raise RuntimeError(
            f"vlrl bench pack compares the planner with verl's Karmarkar-Karp, but verl does not import"
            f" ({error}); install it with `{INSTALL}` (scripts/setup.sh does)"
        ) from error
    return get_seqlen_balanced_partitions


def verl_partitions(costs: np.ndarray, k: int) -> list[list[int]]:
    """Indices of ``costs`` in ``k`` parts, as verl's Karmarkar-Karp splits them."""
    seqlens = [int(round(cost * SCALE)) for cost in np.asarray(costs, dtype=np.float64).tolist()]
    return load()(seqlens, k, equal_size=False)


def rank_totals(costs: np.ndarray, parts: list[list[int]]) -> np.ndarray:
    """``(k,)`` real cost of each part, summed exactly (``math.fsum``) so equal partitions compare equal."""
    return np.array([math.fsum(costs[part]) for part in parts])

