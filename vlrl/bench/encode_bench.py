"""Encoder placement benchmark: who encodes each screenshot of a step, and what moves where.

The workload (``encode_workload``) is a GRPO step of GUI-agent trajectories on phone, browser,
laptop and desktop screens, packed into micro-batches and placed on DP x CP x TP ranks. Four
schemes deliver each rank the embedding rows of the image tokens it holds:

(a) **planner**: ``plan_encoders`` over the step's distinct images (encoder cost, owner
    preference), each rank fetches and encodes its own, one ``all_to_all`` per micro-batch
    (``StepEncoder``);
(b) **token owner**: every rank holding any row of an image encodes the whole image (an image cut
    by a CP chunk or TP shard border is encoded on both sides; a rank encodes an image once per
    step however many of its rows it holds) and fetches those pixels; nothing moves after;
(c) **contiguous + all-gather** (Vision-DP, verl PR #5230 / AReaL PR #929): the step's images in
    order are cut into ``world`` contiguous runs by verl's greedy rule (each rank takes images
    until it reaches the remaining cost over the remaining ranks), each rank encodes its run, all
    ranks all-gather all rows and keep theirs. Every rank holds every image's pixels (fetch-all);
(d) **LPT + padded all-gather** (vLLM's encoder DP): longest-first onto the least loaded rank,
    each rank pads its rows to the largest rank's count, ``all_gather``, keep one's own rows.

(c) and (d) are run over the whole world and step, as the issue words them; the frameworks run
them per forward over the ranks sharing a micro-batch (verl: its Ulysses group), which balances
fewer images (worse) and gathers over fewer ranks (fewer bytes). ``contiguous_sp`` is that
variant: each DP replica's images cut over its CP x TP ranks and gathered among them. All
baselines (``encode_baselines``) are given the planner's cost function and gather without
padding in the byte figures of (c).

The report has the metadata figures (``encode_figures``: loads, fetches and bytes of every
scheme over layouts, step sizes and seeds), then the wall times of the four schemes in a real
4-process gloo world (``encode_wall``); top-level ``speedup_vs_*`` is the smaller of the two
world-4 layouts'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlrl.bench.encode_figures import measure
from vlrl.bench.encode_wall import WallSpec, wall
from vlrl.bench.encode_workload import WORLD4_LAYOUTS


@dataclass(frozen=True, slots=True)
class Size:
    layouts: tuple[tuple[int, int, int], ...]
    """(DP, CP, TP) of the metadata instances."""
    items_per_rank: tuple[int, ...]
    """Distinct screenshots per rank of a step."""
    seeds: tuple[int, ...]
    wall: WallSpec


SIZES = {
    "smoke": Size(WORLD4_LAYOUTS, (2, 8), (0,), WallSpec(n_images=24, reps=2)),
    "small": Size(WORLD4_LAYOUTS, (2, 8, 32), (0, 1, 2), WallSpec(n_images=48, reps=3)),
    "full": Size((*WORLD4_LAYOUTS, (2, 2, 2), (4, 2, 2)), (2, 4, 8, 16, 32, 64), tuple(range(10)), WallSpec(128, 5)),
}


def run(size: str) -> dict[str, Any]:
    """``vlrl bench encode``: metadata figures over layouts, step sizes and seeds, then the wall
    times of the four schemes in a 4-process gloo world (``small``: 48 screenshots, ``full``: 128)."""
    config = SIZES[size]
    figures = measure(config.layouts, config.items_per_rank, config.seeds)
    layouts = figures.pop("layouts")
    timed = wall(config.wall)
    speedups = {  # the smaller of the two layouts'
        key: min(layout[key] for layout in timed.values())
        for key in ("speedup_vs_token_owner", "speedup_vs_allgather", "speedup_vs_padded_allgather")
    }
    return {**figures, **speedups, "layouts": layouts, "wall": timed}
