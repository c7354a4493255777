"""The encode benchmark's metadata figures: every scheme's loads, fetches and bytes, no pixels.

Every instance (``measure_instance``) is one step of ``items_per_rank * world`` distinct images
under one layout and seed:

- ``imbalance_*``: costliest rank's encoder load over the mean rank's load, each scheme over its
  own loads; ``imbalance_optimum`` is the best any assignment reaches, found by trying them all
  where there are few (``world ** (images - 1) <= 2**20``). (b)'s loads include its duplicated work
  (``token_owner_work``: its total over the distinct images' total), so ``token_owner_makespan``
  (its max load over the ideal ``distinct cost / world``) is what the step waits for;
- ``fetch_ratio``: pixel bytes the busiest rank fetches under (a) over fetch-all (every distinct
  image of the step, what each rank of (c)/(d) reads); the mean over ranks is 1/world for any
  assignment, so it is not reported;
- ``a2a_bytes``: embedding rows (a) sends to another rank over all micro-batches, times
  3584 x 2 bytes (bf16 rows of the 7B LLM); ``allgather_bytes``: rows every rank receives
  from the others under (c), ``(world - 1) * rows``; ``padded_allgather_bytes``: (d)'s
  ``world * (world - 1) * max rank rows``; ``sp_allgather_bytes``: the per-replica variant;
- ``*_vs_lower_bound``: a scheme's costliest rank over ``max(largest image, total / world)``,
  which no assignment beats (``imbalance_vs_lower_bound``: the planner's); ``_sp``: per replica;
- ``owner_local_fraction``: distinct images whose encoder rank holds some of their tokens, with
  the planner's owner preference and without (``_no_pref``); ``local_row_fraction``: embedding
  rows that stay on the encoding rank, with and without;
- ``dedup_saving``: on a step where the 8 members of each group share their first screenshot,
  ``1 - (encoder cost of distinct images) / (encoder cost of every occurrence)``.

Top-level figures (``measure``) take the worst instance over the world-4 layouts (1x2x2, 2x2x1)
and seeds with ``items_per_rank >= 8`` (``*_2pr``: at 2 per rank); ``owner_*`` and ``local_row_*``
are means over those instances; ``vs_lower_bound`` holds each scheme's worst ratio to the lower
bound at each step size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vlrl.bench.encode_baselines import (
    contiguous_ranks,
    imbalance,
    lpt_ranks,
    optimal_imbalance,
    over_lower_bound,
)
from vlrl.bench.encode_workload import (
    SCREEN_WORKLOAD,
    WORLD4_LAYOUTS,
    Workload,
    build_metas,
    draw_trajectories,
    fake_item,
    place,
    vit_7b_cost,
)
from vlrl.pack import Layout
from vlrl.train.encode_plan import plan_encoders

ROW_BYTES = 3584 * 2
"""One embedding row of the 7B LLM in bf16."""
LOWER_BOUND_SCHEMES = {
    "planner": "imbalance", "lpt": "lpt", "contiguous": "contiguous",
    "contiguous_sp": "contiguous_sp", "lpt_sp": "lpt_sp",
}  # fmt: skip
"""``vs_lower_bound`` entry -> the instance figure ``{key}_vs_lower_bound``."""


def measure_instance(
    layout: Layout, items_per_rank: int, seed: int, workload: Workload = SCREEN_WORKLOAD
) -> dict[str, float]:
    """Every metadata figure of one step of ``items_per_rank * world`` distinct screenshots."""
    world = layout.world_size
    trajectories = draw_trajectories(items_per_rank * world, seed, max_turns=workload.max_turns)
    metas = build_metas(trajectories, workload, lambda i, s: fake_item(i, s, workload, seed), seed)
    images = place(metas, layout, workload)
    owners = images.owners()
    planner = plan_encoders(images.items, world, cost=vit_7b_cost, owners=owners)
    no_pref = plan_encoders(images.items, world, cost=vit_7b_cost)
    index = {h: i for i, h in enumerate(planner.hashes)}
    costs = np.asarray(planner.costs)
    rows = np.asarray(planner.num_tokens, dtype=np.int64)
    nbytes = np.zeros(len(costs))
    for item in images.items:
        nbytes[index[item.content_hash]] = item.nbytes
    pieces = [p for mb in images.micro_batches for p in mb.pieces]
    piece_item = np.array([index[p.content_hash] for p in pieces], dtype=np.int64)
    piece_dest = np.array([p.dest_rank for p in pieces], dtype=np.int64)
    piece_rows = np.array([p.num_rows for p in pieces], dtype=np.int64)

    # (b): a rank encodes each image it holds rows of, once.
    held = {(h, r) for h, ranks in owners.items() for r in ranks}
    owner_loads = np.zeros(world)
    owner_bytes = np.zeros(world)
    for h, r in held:
        owner_loads[r] += costs[index[h]]
        owner_bytes[r] += nbytes[index[h]]
    # (c) per replica: each DP replica's images, in order, over its CP x TP ranks.
    group = layout.cp * layout.tp
    sp_loads, lpt_sp_loads = np.zeros(world), np.zeros(world)
    sp_rows = 0
    for dp in range(layout.dp):
        first_rank = layout.rank(dp, 0, 0)  # a replica's ranks are consecutive
        mine = sorted({int(i) for i, d in zip(piece_item, piece_dest) if first_rank <= d < first_rank + group})
        sp_loads[first_rank : first_rank + group] = np.bincount(
            contiguous_ranks(costs[mine], group), weights=costs[mine], minlength=group
        )
        lpt_sp_loads[first_rank : first_rank + group] = np.bincount(
            lpt_ranks(costs[mine], group), weights=costs[mine], minlength=group
        )
        sp_rows += (group - 1) * int(rows[mine].sum())

    def moved(ranks: np.ndarray) -> int:
        return int(piece_rows[ranks[piece_item] != piece_dest].sum())

    def owner_local(ranks: np.ndarray) -> float:
        return float(np.mean([int(ranks[index[h]]) in owners[h] for h in planner.hashes]))

    with_pref, without = np.asarray(planner.ranks), np.asarray(no_pref.ranks)
    lpt, contiguous = lpt_ranks(costs, world), contiguous_ranks(costs, world)
    a2a = moved(with_pref) * ROW_BYTES
    allgather = (world - 1) * int(rows.sum()) * ROW_BYTES
    padded = world * (world - 1) * int(np.bincount(lpt, weights=rows, minlength=world).max()) * ROW_BYTES
    fetch_all = float(nbytes.sum())
    optimum = optimal_imbalance(costs, world)
    lpt_loads = np.bincount(lpt, weights=costs, minlength=world)
    contiguous_loads = np.bincount(contiguous, weights=costs, minlength=world)
    return {
        "images": len(costs),
        "micro_batches": len(images.micro_batches),
        **({"imbalance_optimum": optimum} if optimum is not None else {}),
        "imbalance_planner": planner.imbalance,
        "imbalance_planner_no_pref": no_pref.imbalance,
        "imbalance_lpt": imbalance(lpt_loads),
        "imbalance_contiguous": imbalance(contiguous_loads),
        "imbalance_contiguous_sp": imbalance(sp_loads),
        "imbalance_lpt_sp": imbalance(lpt_sp_loads),
        "imbalance_vs_lower_bound": over_lower_bound(planner.loads, costs),
        "lpt_vs_lower_bound": over_lower_bound(lpt_loads, costs),
        "contiguous_vs_lower_bound": over_lower_bound(contiguous_loads, costs),
        "contiguous_sp_vs_lower_bound": over_lower_bound(sp_loads, costs),
        "lpt_sp_vs_lower_bound": over_lower_bound(lpt_sp_loads, costs),
        "imbalance_token_owner": imbalance(owner_loads),
        "token_owner_work": float(owner_loads.sum() / costs.sum()),
        "token_owner_makespan": float(owner_loads.max() / (costs.sum() / world)),
        "fetch_ratio": float(np.bincount(with_pref, weights=nbytes, minlength=world).max() / fetch_all),
        "fetch_ratio_token_owner": float(owner_bytes.max() / fetch_all),
        "a2a_bytes": a2a,
        "a2a_bytes_no_pref": moved(without) * ROW_BYTES,
        "allgather_bytes": allgather,
        "padded_allgather_bytes": padded,
        "sp_allgather_bytes": sp_rows * ROW_BYTES,
        "a2a_over_allgather": a2a / allgather,
        "a2a_over_padded_allgather": a2a / padded,
        "a2a_over_sp_allgather": a2a / (sp_rows * ROW_BYTES),
        "owner_local_fraction": owner_local(with_pref),
        "owner_local_fraction_no_pref": owner_local(without),
        "local_row_fraction": 1 - moved(with_pref) / int(piece_rows.sum()),
        "local_row_fraction_no_pref": 1 - moved(without) / int(piece_rows.sum()),
    }


def dedup_saving(seed: int, n_images: int = 512, group_size: int = 8, workload: Workload = SCREEN_WORKLOAD) -> float:
    """``1 - distinct cost / occurrence cost`` of a step of ``n_images`` screenshots whose groups
    of ``group_size`` share their first one."""
    trajectories = draw_trajectories(n_images, seed, group_size=group_size, share_first=True)
    metas = build_metas(trajectories, workload, lambda i, s: fake_item(i, s, workload, seed), seed)
    occurrences = [m.images[index] for m in metas for _, index in m.image_offsets]
    distinct = {item.content_hash: item for item in occurrences}
    return 1 - math.fsum(map(vit_7b_cost, distinct.values())) / math.fsum(map(vit_7b_cost, occurrences))


def measure(
    layouts: Sequence[tuple[int, int, int]], items_per_rank: Sequence[int], seeds: Sequence[int]
) -> dict[str, Any]:
    """Metadata figures of every (layout, items per rank, seed); per-layout means and top-level
    worst cases as the module docstring says."""
    instances = {
        (shape, k, seed): measure_instance(Layout(*shape), k, seed)
        for shape in layouts for k in items_per_rank for seed in seeds
    }  # fmt: skip
    per_layout: dict[str, dict[str, dict[str, float]]] = {}
    for shape in layouts:
        per_layout["x".join(map(str, shape))] = {
            f"ipr{k}": {
                key: float(np.mean([instances[shape, k, s][key] for s in seeds]))
                for key in instances[shape, k, seeds[0]]
            }
            for k in items_per_rank
        }
    top = [f for (shape, k, _), f in instances.items() if shape in WORLD4_LAYOUTS and k >= 8]
    two = [f for (shape, k, _), f in instances.items() if shape in WORLD4_LAYOUTS and k == 2]

    def worst(key: str, among: list[dict[str, float]] = top) -> float:
        return max(f[key] for f in among)

    def mean(key: str) -> float:
        return float(np.mean([f[key] for f in top]))

    figures: dict[str, Any] = {
        "imbalance_planner": worst("imbalance_planner"),
        "imbalance_lpt": worst("imbalance_lpt"),
        "imbalance_contiguous": worst("imbalance_contiguous"),
        "imbalance_contiguous_sp": worst("imbalance_contiguous_sp"),
        "imbalance_lpt_sp": worst("imbalance_lpt_sp"),
        "imbalance_vs_lower_bound": worst("imbalance_vs_lower_bound"),
        "imbalance_token_owner": worst("imbalance_token_owner"),
        "token_owner_makespan": worst("token_owner_makespan"),
        "fetch_ratio": worst("fetch_ratio"),
        "fetch_ratio_token_owner": worst("fetch_ratio_token_owner"),
        "a2a_over_allgather": worst("a2a_over_allgather"),
        "a2a_over_padded_allgather": worst("a2a_over_padded_allgather"),
        "a2a_over_sp_allgather": worst("a2a_over_sp_allgather"),
        "owner_local_fraction": mean("owner_local_fraction"),
        "owner_local_fraction_no_pref": mean("owner_local_fraction_no_pref"),
        "local_row_fraction": mean("local_row_fraction"),
        "local_row_fraction_no_pref": mean("local_row_fraction_no_pref"),
    }
    if two:
        figures |= {
            "imbalance_planner_2pr": worst("imbalance_planner", two),
            "imbalance_lpt_2pr": worst("imbalance_lpt", two),
            "imbalance_optimum_2pr": worst("imbalance_optimum", two),
            "imbalance_vs_lower_bound_2pr": worst("imbalance_vs_lower_bound", two),
            "planner_over_lpt_2pr": max(f["imbalance_planner"] / f["imbalance_lpt"] for f in two),
            "planner_over_optimum_2pr": max(f["imbalance_planner"] / f["imbalance_optimum"] for f in two),
        }
    at = {k: [f for (s, j, _), f in instances.items() if s in WORLD4_LAYOUTS and j == k] for k in items_per_rank}
    figures["vs_lower_bound"] = {
        f"ipr{k}": {scheme: worst(f"{key}_vs_lower_bound", at[k]) for scheme, key in LOWER_BOUND_SCHEMES.items()}
        for k in items_per_rank
    }
    figures["dedup_saving"] = float(np.mean([dedup_saving(seed) for seed in seeds]))
    return {**figures, "layouts": per_layout}
