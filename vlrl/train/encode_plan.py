"""``plan_encoders``: which rank encodes each distinct image of a step, from metadata alone.

The vision encoder runs once per *distinct* content hash in a step (a screenshot repeated across
turns or group members is encoded once; its embedding is then sent to every rank holding one of
its occurrences, see ``vlrl.train.redistribute``). The planner sees ``MMItemMeta`` and a cost
function, never pixels: each rank fetches only the pixels of the items assigned to it.

Balancing is multiprocessor scheduling (minimise the largest rank load), solved in three steps:

1. **Seed.** LPT (longest processing time first: items by cost descending, each to the least
   loaded rank) ends within ``max item cost`` of the optimum. Up to ``KK_MAX_ITEMS`` items the
   Karmarkar-Karp partition (``vlrl.pack.kk``) is computed too and the better seed kept: on few
   items KK often wins, on many, LPT's error (one small item) is already negligible and KK's
   Python cost is not.
2. **Refine.** Repeatedly take the heaviest rank ``h`` and the lightest ``l`` with gap
   ``g = load[h] - load[l]``, and apply the best single move (item ``x`` from ``h`` to ``l``) or
   swap (``x`` in ``h`` for ``y`` in ``l``): it shifts ``d = c_x`` or ``d = c_x - c_y`` from ``h``
   to ``l``, and any ``0 < d < g`` lowers ``max(load[h], load[l])``; the best ``d`` is the one
   closest to ``g / 2``. Each step lowers the sum of squared loads by ``2 d (g - d) > 0``, so it
   terminates; it is capped at ``REFINE_STEPS`` all the same.
3. **Prefer owners.** An item not on a rank holding its tokens moves to one that does when that
   keeps the owner's load within the makespan, or swaps with an equal-cost item the owner holds
   for someone else: the max load (and so the imbalance) is unchanged, and those rows then need
   no network hop.

The result is the same on every rank: ties break by rank index and item first-seen order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vlrl.pack.kk import karmarkar_karp
from vlrl.records import MMItemMeta

KK_MAX_ITEMS = 20_000
"""Distinct items up to which the Karmarkar-Karp seed is tried beside LPT (~0.1 s there)."""
REFINE_STEPS = 10_000
"""Upper bound on refinement moves (each strictly improves; the bound only caps the work)."""


def token_cost(item: MMItemMeta) -> float:
    """Encoder cost proportional to the item's tokens: a ViT's patches are a fixed multiple of them."""
    return float(item.num_tokens)


@dataclass(frozen=True, slots=True)
class EncodePlan:
    """Distinct items of a step and the rank that encodes each one."""

    world_size: int
    hashes: tuple[str, ...]
    """Distinct content hashes, in first-seen order."""
    num_tokens: tuple[int, ...]
    """Embedding rows of each distinct item."""
    costs: tuple[float, ...]
    ranks: tuple[int, ...]
    """Encoder rank of each distinct item."""

    def items_of(self, rank: int) -> list[int]:
        """Indices into ``hashes`` that ``rank`` encodes, in first-seen order: its output row order."""
        return [i for i, r in enumerate(self.ranks) if r == rank]

    @property
    def loads(self) -> np.ndarray:
        """Total encoder cost per rank, ``(world_size,)``."""
        return np.bincount(self.ranks, weights=self.costs, minlength=self.world_size)

    @property
    def imbalance(self) -> float:
        """``max load / mean load``: 1.0 is perfect; the step waits for the slowest rank."""
        loads = self.loads
        mean = loads.mean()
        return float(loads.max() / mean) if mean > 0 else 1.0


def plan_encoders(
    items: Sequence[MMItemMeta],
    world_size: int,
    *,
    cost: Callable[[MMItemMeta], float] = token_cost,
    owners: Mapping[str, Collection[int]] | None = None,
) -> EncodePlan:
    """Assign each distinct content hash among ``items`` (one step's images, repeats allowed) to one
    of ``world_size`` encoder ranks, balancing total ``cost``. ``owners`` maps a hash to the ranks
    holding its tokens; an item moves to one of them when that does not raise the max load."""
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size={world_size!r}; expected an int >= 1")
    hashes, num_tokens, costs = _distinct(items, cost)
    values = np.asarray(costs, dtype=np.float64)
    ranks = _lpt(values, world_size)
    if len(values) <= KK_MAX_ITEMS:
        kk = np.empty(len(values), dtype=np.int64)
        for rank, part in enumerate(karmarkar_karp(values, world_size)):
            kk[part] = rank
        if _makespan(values, kk, world_size) < _makespan(values, ranks, world_size):
            ranks = kk
    _refine(values, ranks, world_size)
    if owners:
        _prefer_owners(hashes, values, ranks, world_size, owners)
    return EncodePlan(world_size, tuple(hashes), tuple(num_tokens), tuple(costs), tuple(ranks.tolist()))


def _distinct(items: Sequence[MMItemMeta], cost: Callable[[MMItemMeta], float]):
    """Hashes, token counts and costs of the distinct items, checked: metadata in, never pixels."""
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)) or _is_array(items):
        raise TypeError(f"items: {type(items).__name__}; expected a sequence of MMItemMeta (metadata, never pixels)")
    seen: dict[str, int] = {}
    hashes, num_tokens, costs = [], [], []
    for i, item in enumerate(items):
        if not isinstance(item, MMItemMeta):
            what = "pixels" if _is_array(item) else "not metadata"
            raise TypeError(
                f"items[{i}]: {type(item).__name__} ({what}); the encoder planner takes MMItemMeta only,"
                " each rank fetches its own pixels"
            )
        if item.num_tokens is None:
            raise ValueError(f"items[{i}] ({item.content_hash}): num_tokens is None; apply the encoder's patch rule")
        if item.content_hash in seen:
            first = num_tokens[seen[item.content_hash]]
            if first != item.num_tokens:
                raise ValueError(
                    f"items[{i}] ({item.content_hash}): num_tokens={item.num_tokens}, but an earlier item"
                    f" with that hash has {first}"
                )
            continue
        value = cost(item)
        if _is_array(value) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"cost(items[{i}]) = {value!r}; expected a finite number >= 0")
        seen[item.content_hash] = len(hashes)
        hashes.append(item.content_hash)
        num_tokens.append(item.num_tokens)
        costs.append(float(value))
    return hashes, num_tokens, costs


def _is_array(value: object) -> bool:
    """A numpy array or a torch tensor (checked by type name: the planner never imports torch)."""
    return isinstance(value, np.ndarray) or type(value).__module__.startswith("torch")


def _lpt(values: np.ndarray, k: int) -> np.ndarray:
    """Longest processing time first: costly items first, each to the least loaded rank."""
    ranks = np.empty(len(values), dtype=np.int64)
    heap = [(0.0, rank) for rank in range(k)]  # (load, rank): ties go to the lower rank
    for i in np.argsort(-values, kind="stable").tolist():
        load, rank = heap[0]
        ranks[i] = rank
        heapq.heapreplace(heap, (load + values[i], rank))
    return ranks


def _makespan(values: np.ndarray, ranks: np.ndarray, k: int) -> float:
    return float(np.bincount(ranks, weights=values, minlength=k).max())


def _refine(values: np.ndarray, ranks: np.ndarray, k: int) -> None:
    """Moves and swaps between the heaviest and lightest rank while one narrows their gap (in place)."""
    if k < 2:
        return
    loads = np.bincount(ranks, weights=values, minlength=k)
    tol = 1e-12 * max(float(loads.max()), 1.0)
    for _ in range(REFINE_STEPS):
        heavy, light = int(np.argmax(loads)), int(np.argmin(loads))
        gap = loads[heavy] - loads[light]
        if gap <= tol:
            return
        on_heavy = np.flatnonzero(ranks == heavy)
        on_light = np.flatnonzero(ranks == light)
        # Candidate shifts d: one item moved (y = none, d = c_x) or swapped (d = c_x - c_y).
        order = np.argsort(values[on_heavy], kind="stable")
        sorted_heavy = values[on_heavy][order]
        light_costs = np.concatenate([[0.0], values[on_light]])  # 0.0: the move, no item back
        want = light_costs + gap / 2  # c_x closest to c_y + g/2
        at = np.searchsorted(sorted_heavy, want)
        best = None  # (|d - g/2|, x, y or -1)
        for near in (np.maximum(at - 1, 0), np.minimum(at, len(sorted_heavy) - 1)):  # neighbours of want
            shift = sorted_heavy[near] - light_costs
            score = np.where((shift > tol) & (shift < gap - tol), np.abs(shift - gap / 2), np.inf)
            j = int(np.argmin(score))
            if np.isfinite(score[j]) and (best is None or score[j] < best[0]):
                best = (float(score[j]), int(on_heavy[order[near[j]]]), int(on_light[j - 1]) if j else -1)
        if best is None:
            return
        _, x, y = best
        shift = values[x] - (values[y] if y >= 0 else 0.0)
        ranks[x] = light
        if y >= 0:
            ranks[y] = heavy
        loads[heavy] -= shift
        loads[light] += shift


def _prefer_owners(
    hashes: list[str], values: np.ndarray, ranks: np.ndarray, k: int, owners: Mapping[str, Collection[int]]
) -> None:
    """Move items onto a rank holding their tokens where that keeps every load within the makespan;
    where the owner has no room, swap with an equal-cost item of the owner's that is not at home
    there (loads unchanged). Screens come in a few fixed sizes, so equal costs are common."""
    loads = np.bincount(ranks, weights=values, minlength=k)
    makespan = loads.max()
    held = [sorted(owners.get(h, ())) for h in hashes]
    for i, ranks_held in enumerate(held):
        for rank in ranks_held:
            if not 0 <= rank < k:
                raise ValueError(f"owners[{hashes[i]!r}] holds rank {rank}; expected 0..{k - 1}")
    # (rank, cost) -> items there that do not hold their own tokens on it: swap partners
    away: dict[tuple[int, float], dict[int, None]] = {}  # insertion-ordered sets
    for i, ranks_held in enumerate(held):
        if ranks_held and ranks[i] not in ranks_held:
            away.setdefault((int(ranks[i]), float(values[i])), {})[i] = None
    for i, ranks_held in enumerate(held):
        if not ranks_held or ranks[i] in ranks_held:
            continue
        here = int(ranks[i])
        for rank in ranks_held:
            if loads[rank] + values[i] <= makespan:
                loads[here] -= values[i]
                loads[rank] += values[i]
                _leave(away, here, values[i], i)
                ranks[i] = rank
                break
            partners = away.get((rank, float(values[i])), {})
            j = next(iter(partners), None)  # never i itself: i is away from `here`, not `rank`
            if j is not None:  # equal costs: both loads stay as they are
                _leave(away, here, values[i], i)
                _leave(away, rank, values[j], j)
                ranks[i], ranks[j] = rank, here
                if here not in held[j]:
                    away.setdefault((here, float(values[j])), {})[j] = None
                break


def _leave(away: dict[tuple[int, float], dict[int, None]], rank: int, cost: float, item: int) -> None:
    away.get((rank, float(cost)), {}).pop(item, None)
