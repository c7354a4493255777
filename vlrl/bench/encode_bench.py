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
    ranks all-gather all rows and keep theirs (in the wall run padded to the largest rank's rows:
    gloo gathers equal sizes only). Every rank holds every image's pixels (fetch-all);
(d) **LPT + padded all-gather** (vLLM's encoder DP): longest-first onto the least loaded rank,
    each rank pads its rows to the largest rank's count, ``all_gather``, keep one's own rows.

The frameworks run (c) and (d) per forward over the ranks sharing a micro-batch (verl: its
Ulysses group), so the fair baselines are ``contiguous_sp`` and ``lpt_sp``: each DP replica's
images cut over its CP x TP ranks, each rank fetching its own pixels, gathered among them; the
headline ``speedup_vs_*`` is against those and the token owner. (c) and (d) over the whole world
and step, every rank reading every image (fetch-all), stay in the report as ``*_world``. All
baselines (``encode_baselines``) are given the planner's cost function.

The report has the metadata figures (``encode_figures``: loads against each other and against the
lower bound, fetches and modelled bytes of every scheme over layouts, step sizes and seeds), then
the wall run of the schemes in a real 4-process gloo world (``encode_wall``: times, bytes counted
at the collectives, encoder calls with and without dedup, rows checked against a reference).
Top-level wall figures over its two world-4 layouts: ``speedup_vs_*`` is the layout whose median
is smaller (its ``{min, median, max}`` over rounds); ``a2a_bytes_measured`` and
``allgather_sp_bytes_measured`` are sums over both layouts, and so is ``dedup``.
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
    "smoke": Size(WORLD4_LAYOUTS, (2, 8), (0,), WallSpec(n_images=24, reps=1)),
    "small": Size(WORLD4_LAYOUTS, (2, 8, 32), (0, 1, 2), WallSpec(n_images=48, reps=5)),
    "full": Size(
        (*WORLD4_LAYOUTS, (2, 2, 2), (4, 2, 2)), (2, 4, 8, 16, 32, 64), tuple(range(10)), WallSpec(128, 7, group_size=4)
    ),
}
HEADLINE_SPEEDUPS = ("speedup_vs_token_owner", "speedup_vs_allgather_sp", "speedup_vs_padded_allgather_sp")
DEDUP_COUNTS = ("images_encoded", "images_encoded_no_dedup", "rows_encoded", "rows_encoded_no_dedup")


def run(size: str) -> dict[str, Any]:
    """``vlrl bench encode``: metadata figures over layouts, step sizes and seeds, then the wall
    run of the schemes in a 4-process gloo world (``small``: 48 screenshots, ``full``: 128)."""
    config = SIZES[size]
    figures = measure(config.layouts, config.items_per_rank, config.seeds)
    layouts = figures.pop("layouts")
    timed = wall(config.wall)
    speedups = {  # the layout with the smaller median, its spread over rounds
        key: min((layout[key] | {"layout": name} for name, layout in timed.items()), key=lambda s: s["median"])
        for key in HEADLINE_SPEEDUPS
    }
    a2a = sum(layout["a2a_bytes_measured"] for layout in timed.values())
    allgather_sp = sum(layout["allgather_sp_bytes_measured"] for layout in timed.values())
    measured = {
        "a2a_bytes_measured": a2a,
        "allgather_sp_bytes_measured": allgather_sp,
        "a2a_over_allgather_sp_measured": a2a / allgather_sp,
        "outputs_match": all(layout["outputs_match"] for layout in timed.values()),
        "dedup": {key: sum(layout["dedup"][key] for layout in timed.values()) for key in DEDUP_COUNTS},
    }
    return {**figures, **speedups, **measured, "layouts": layouts, "wall": timed}
