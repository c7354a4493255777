"""Encoder placement benchmark: who encodes each screenshot of a step, and what moves where.

The workload is a GRPO step of GUI-agent trajectories. A trajectory runs on one device, drawn
from phones (1080x2400, 1440x3200), a browser viewport (1280x720), laptops (1366x768, 1440x900)
and desktops (1920x1080, 2560x1440), and holds ``1 + Poisson(3.5)`` screenshots (at most 10),
one per turn, between a prompt and per-turn text. Token counts follow UI-TARS's processor bounds
(``max_pixels = 16384*28*28``: screens keep their native resolution, so a 1440p screenshot is
4641 tokens and a laptop one 1323); the encoder cost is ``ViTCost`` of the Qwen2-VL-7B tower
(32 full-attention layers of width 1280), so the costliest screenshot is ~12x the cheapest.
Costs come in seven values, one per screen, which bounds how evenly few images can be split.
Sequences are packed by ``MicroBatchPlanner`` (65536-token micro-batches) and placed on
DP x CP x TP ranks by ``step_images``. Four schemes deliver each rank the embedding rows of the
image tokens it holds:

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
baselines are given the planner's cost function (verl and vLLM balance patch counts, which
ignore attention's quadratic term) and gather without padding in the byte figures of (c).

Metadata figures (``measure``; every instance is one step of ``items_per_rank * world`` distinct
images under one layout and seed):

- ``imbalance_*``: costliest rank's encoder load over the mean rank's load, each scheme over its
  own loads; ``imbalance_optimum`` is the best any assignment reaches, found by trying them all
  where there are few (``world ** (images - 1) <= 2**20``). (b)'s loads include its duplicated work (``token_owner_work``: its total over the
  distinct images' total), so ``token_owner_makespan`` (its max load over the ideal
  ``distinct cost / world``) is what the step waits for;
- ``fetch_ratio``: pixel bytes the busiest rank fetches under (a) over fetch-all (every distinct
  image of the step, what each rank of (c)/(d) reads); the mean over ranks is exactly 1/world;
- ``a2a_bytes``: embedding rows (a) sends to another rank over all micro-batches, times
  3584 x 2 bytes (bf16 rows of the 7B LLM); ``allgather_bytes``: rows every rank receives
  from the others under (c), ``(world - 1) * rows``; ``padded_allgather_bytes``: (d)'s
  ``world * (world - 1) * max rank rows``; ``sp_allgather_bytes``: the per-replica variant;
- ``owner_local_fraction``: distinct images whose encoder rank holds some of their tokens, with
  the planner's owner preference and without (``_no_pref``); ``local_row_fraction``: embedding
  rows that stay on the encoding rank, with and without;
- ``dedup_saving``: on a step where the 8 members of each group share their first screenshot,
  ``1 - (encoder cost of distinct images) / (encoder cost of every occurrence)``.

Top-level figures take the worst instance over the world-4 layouts (1x2x2, 2x2x1) and seeds with
``items_per_rank >= 8`` (``*_2pr``: at 2 per rank); ``owner_*`` and ``local_row_*`` are means
over those instances.

Wall figures (``wall``) run the four schemes side by side in a real 4-process gloo world on CPU
(one thread each) with a small Qwen2-VL tower on the same trajectories at 1/6 of the screen
side. Each rank's ``LocalStore`` holds every screenshot and counts the bytes it reads. A scheme's
time is from a barrier to this rank holding every micro-batch's embeddings (planning, fetch,
preprocess, encode, communication, selecting rows), maxed over ranks; the median over
repetitions is kept, schemes rotated within each. Forward only (no grad). ``speedup_vs_*`` is
a baseline's median time over the planner's, the smaller of the two layouts' at top level.
Ratios are the result, never absolute times.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from encoders.qwen2vl import Qwen2VLEncoder, ViTCost
from vlrl.mm import MMItemMeta, PatchRule, image_store_key, store_image
from vlrl.pack import Layout, MicroBatchPlanner
from vlrl.store import LocalStore
from vlrl.store.records import SeqMeta
from vlrl.train.encode_plan import plan_encoders
from vlrl.train.encode_step import StepEncoder
from vlrl.train.pixel_fetch import PixelFetcher
from vlrl.train.step_images import StepImages, step_images

SCREENS: dict[str, tuple[tuple[int, int], float]] = {
    "phone": ((1080, 2400), 0.20),  # AndroidWorld's emulator
    "phone_qhd": ((1440, 3200), 0.05),
    "web": ((1280, 720), 0.15),  # a browser viewport (WebArena, Mind2Web)
    "laptop": ((1366, 768), 0.10),
    "laptop_hd": ((1440, 900), 0.10),
    "desktop_1080p": ((1920, 1080), 0.25),  # OSWorld
    "desktop_1440p": ((2560, 1440), 0.15),
}
"""Device name -> ((width, height), share of trajectories)."""

RULE = PatchRule(min_pixels=100 * 28 * 28, max_pixels=16384 * 28 * 28)
"""UI-TARS's processor bounds: GUI screenshots keep their native resolution."""

VIT_7B = ViTCost(
    depth=32, embed_dim=1280, mlp_ratio=4, hidden_size=3584, patch_size=14, merge_size=2, temporal_patch_size=2
)
"""Forward FLOPs of the Qwen2-VL-7B vision tower."""


def vit_7b_cost(item: MMItemMeta) -> float:
    """The planner's cost of a screenshot: ``VIT_7B`` FLOPs of its patch grid."""
    return VIT_7B(item.grid_thw)


ROW_BYTES = 3584 * 2
"""One embedding row of the 7B LLM in bf16."""

WORLD4_LAYOUTS = ((1, 2, 2), (2, 2, 1))
"""The layouts (DP, CP, TP) the top-level figures are taken over; also the wall-time world."""


@dataclass(frozen=True, slots=True)
class Workload:
    """How trajectories become ``SeqMeta``: screen scale, patch rule, text lengths, budget."""

    rule: PatchRule = RULE
    scale: int = 1
    """Screens are ``width // scale`` x ``height // scale`` pixels."""
    prompt_tokens: int = 400
    """System prompt and task before the first screenshot."""
    turn_text: tuple[int, int] = (40, 200)
    """Observation + action text tokens after each screenshot, drawn uniformly in ``[lo, hi)``."""
    budget: int = 65536
    """``max_tokens_per_micro_batch`` of the micro-batch planner."""
    max_turns: int = 10


WALL_WORKLOAD = Workload(
    rule=PatchRule(min_pixels=4 * 28 * 28, max_pixels=16384 * 28 * 28 // 36),
    scale=6,
    prompt_tokens=32,
    turn_text=(4, 24),
    budget=2048,
)
"""The same trajectories at 1/6 of the screen side (40..135 tokens per screenshot) for the CPU world."""


@dataclass(frozen=True, slots=True)
class Trajectory:
    screen: str
    images: tuple[int, ...]
    """Image ids, one per turn; a shared first screenshot has the same id in every group member."""
    group: int
    member: int


def draw_trajectories(
    n_images: int, seed: int, *, group_size: int = 1, share_first: bool = False, max_turns: int = 10
) -> list[Trajectory]:
    """Trajectories holding ``n_images`` image occurrences in all (the last one cut short), in
    groups of ``group_size`` on one device; with ``share_first`` a group's members start from
    the same screenshot."""
    rng = np.random.default_rng(seed)
    names = list(SCREENS)
    shares = np.array([SCREENS[n][1] for n in names])
    ids = iter(range(1 << 62))
    out: list[Trajectory] = []
    left, group = n_images, 0
    while left > 0:
        screen = names[int(rng.choice(len(names), p=shares / shares.sum()))]
        first = next(ids)  # the task's opening screen
        for member in range(group_size):
            turns = min(1 + int(rng.poisson(3.5)), max_turns, left)
            opening = first if share_first or member == 0 else next(ids)
            images = (opening, *(next(ids) for _ in range(turns - 1)))
            out.append(Trajectory(screen, images, group, member))
            left -= turns
            if left <= 0:
                break
        group += 1
    return out


def fake_item(image_id: int, screen: str, workload: Workload, salt: int = 0) -> MMItemMeta:
    """Metadata of a screenshot without pixels: the hash names the image id."""
    width, height = (side // workload.scale for side in SCREENS[screen][0])
    content_hash = f"{salt:08x}{image_id:024x}"
    meta = MMItemMeta(
        content_hash=content_hash, width=width, height=height, nbytes=width * height * 3,
        store_key=image_store_key(content_hash),
    )  # fmt: skip
    return meta.with_patch_rule(workload.rule)


def build_metas(
    trajectories: Sequence[Trajectory], workload: Workload, describe: Callable[[int, str], MMItemMeta], seed: int
) -> list[SeqMeta]:
    """``SeqMeta`` of each trajectory: prompt, then per turn a screenshot's tokens and text."""
    rng = np.random.default_rng(seed + 7919)
    lo, hi = workload.turn_text
    metas = []
    for i, traj in enumerate(trajectories):
        items = [describe(image_id, traj.screen) for image_id in traj.images]
        at, offsets, contexts, response = workload.prompt_tokens, [], [], 0
        for index, item in enumerate(items):
            offsets.append((at, index))
            text = int(rng.integers(lo, hi))
            at += item.num_tokens + text // 2
            contexts.append(at)
            response += text - text // 2
            at += text - text // 2
        metas.append(SeqMeta(
            key=f"bench/encode/{i}", group_id=f"g{traj.group}", source=traj.screen, sample_index=traj.member,
            reward=0.0, success=False, finish="done", turns=len(items), num_tokens=at,
            num_response_tokens=response, context_lengths=tuple(contexts), policy_version=0,
            images=tuple(items), image_offsets=tuple(offsets),
        ))  # fmt: skip
    return metas


def place(metas: Sequence[SeqMeta], layout: Layout, workload: Workload) -> StepImages:
    """The step's micro-batch plan for ``layout.dp`` ranks and where its image rows land."""
    plan = MicroBatchPlanner.Config(max_tokens_per_micro_batch=workload.budget).build().plan(metas, layout.dp)
    return step_images(plan, layout, {m.key: m for m in metas})


# ---- the baselines' assignments -----------------------------------------------------------------


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


def _imbalance(loads: np.ndarray) -> float:
    mean = float(loads.mean())
    return float(loads.max()) / mean if mean > 0 else 1.0


# ---- metadata figures ---------------------------------------------------------------------------


def measure_instance(
    layout: Layout, items_per_rank: int, seed: int, workload: Workload = Workload()
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
    sp_loads = np.zeros(world)
    sp_rows = 0
    for dp in range(layout.dp):
        first_rank = layout.rank(dp, 0, 0)  # a replica's ranks are consecutive
        mine = sorted({int(i) for i, d in zip(piece_item, piece_dest) if first_rank <= d < first_rank + group})
        sp_loads[first_rank : first_rank + group] = np.bincount(
            contiguous_ranks(costs[mine], group), weights=costs[mine], minlength=group
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
    return {
        "images": len(costs),
        "micro_batches": len(images.micro_batches),
        **({"imbalance_optimum": optimum} if optimum is not None else {}),
        "imbalance_planner": planner.imbalance,
        "imbalance_planner_no_pref": no_pref.imbalance,
        "imbalance_lpt": _imbalance(np.bincount(lpt, weights=costs, minlength=world)),
        "imbalance_contiguous": _imbalance(np.bincount(contiguous, weights=costs, minlength=world)),
        "imbalance_contiguous_sp": _imbalance(sp_loads),
        "imbalance_token_owner": _imbalance(owner_loads),
        "token_owner_work": float(owner_loads.sum() / costs.sum()),
        "token_owner_makespan": float(owner_loads.max() / (costs.sum() / world)),
        "fetch_ratio": float(np.bincount(with_pref, weights=nbytes, minlength=world).max() / fetch_all),
        "fetch_ratio_mean": float(np.bincount(with_pref, weights=nbytes, minlength=world).mean() / fetch_all),
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


def dedup_saving(seed: int, n_images: int = 512, group_size: int = 8, workload: Workload = Workload()) -> float:
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
            "planner_over_lpt_2pr": max(f["imbalance_planner"] / f["imbalance_lpt"] for f in two),
            "planner_over_optimum_2pr": max(f["imbalance_planner"] / f["imbalance_optimum"] for f in two),
        }
    figures["dedup_saving"] = float(np.mean([dedup_saving(seed) for seed in seeds]))
    return {**figures, "layouts": per_layout}


# ---- wall time in a 4-process gloo world --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WallSpec:
    """The timed run: one step of ``n_images`` screenshots per layout, ``reps`` timed rounds."""

    n_images: int
    reps: int
    seed: int = 0
    layouts: tuple[tuple[int, int, int], ...] = WORLD4_LAYOUTS
    workload: Workload = WALL_WORKLOAD
    encoder: tuple[tuple[str, Any], ...] = (
        ("depth", 4), ("embed_dim", 128), ("hidden_size", 256), ("num_heads", 4), ("mlp_ratio", 4),
    )  # fmt: skip
    """Fields of the small ``Qwen2VLEncoder.Config`` (its patch rule is the workload's)."""


def wall(spec: WallSpec, world: int = 4) -> dict[str, Any]:
    """Time the four schemes side by side in a ``world``-process gloo world on CPU."""
    with tempfile.TemporaryDirectory(prefix="vlrl-encode-bench-") as tmp:
        out = Path(tmp) / "result.json"
        mp.spawn(_rank_main, args=(world, str(Path(tmp) / "rdzv"), str(out), spec), nprocs=world, join=True)
        return json.loads(out.read_text())


def _rank_main(rank: int, world: int, rdzv: str, out: str, spec: WallSpec) -> None:
    torch.set_num_threads(1)
    # The processor wraps the store's read-only pixel views without writing to them.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    dist.init_process_group(
        "gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world, timeout=timedelta(seconds=300)
    )
    try:
        workload = spec.workload
        store = LocalStore()

        def describe(image_id: int, screen: str) -> MMItemMeta:
            width, height = (side // workload.scale for side in SCREENS[screen][0])
            pixels = np.random.default_rng((spec.seed, image_id)).integers(0, 256, (height, width, 3), dtype=np.uint8)
            return store_image(store, pixels, rule=workload.rule)

        trajectories = draw_trajectories(spec.n_images, spec.seed, max_turns=workload.max_turns)
        metas = build_metas(trajectories, workload, describe, spec.seed)
        torch.manual_seed(0)
        encoder = Qwen2VLEncoder.Config(**dict(spec.encoder), patch_rule=workload.rule).build().eval()
        results = {}
        for shape in spec.layouts:
            layout = Layout(*shape)
            layout.check_world(world)
            images = place(metas, layout, workload)
            results["x".join(map(str, shape))] = _time_layout(layout, rank, store, encoder, images, spec.reps)
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _time_layout(layout: Layout, rank: int, store, encoder, images: StepImages, reps: int) -> dict[str, Any]:
    """Every scheme once to check they agree, then ``reps`` timed rounds, rotating the order."""
    schemes = _Schemes(layout, rank, store, encoder, images)
    runs = {
        "planner": schemes.planner,
        "token_owner": schemes.token_owner,
        "contiguous": lambda: schemes.gathered(contiguous_ranks),
        "lpt": lambda: schemes.gathered(lpt_ranks),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    fetched: dict[str, int] = {}
    names = list(runs)
    with torch.no_grad():
        reference = schemes.planner()
        for name, scheme in runs.items():  # the warm-up round: every scheme gives the same rows
            for i, (got, want) in enumerate(zip(scheme(), reference, strict=True)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m: f"{name} mb {i}: {m}")
        for rep in range(reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                dist.barrier()
                before = store.io_stats().bytes_read
                start = time.perf_counter()
                runs[name]()
                spent = [time.perf_counter() - start, store.io_stats().bytes_read - before]
                slowest = torch.tensor(spent, dtype=torch.float64)  # (seconds, bytes fetched)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                times[name].append(float(slowest[0]))
                fetched[name] = int(slowest[1])
    schemes.close()

    world, costs = layout.world_size, schemes.costs
    plan, routings = schemes.step_encoder.plan(images)
    median = {name: statistics.median(t) for name, t in times.items()}
    fetch_all = sum(item.nbytes for item in schemes.items.values())
    rows_all = sum(item.num_tokens for item in schemes.items.values())
    owner_loads = np.zeros(world)
    for content_hash, ranks in images.owners().items():
        owner_loads[sorted(ranks)] += costs[schemes.hashes.index(content_hash)]
    return {
        "images": len(schemes.hashes),
        "micro_batches": len(images.micro_batches),
        "time_s": median,
        "speedup_vs_token_owner": median["token_owner"] / median["planner"],
        "speedup_vs_allgather": median["contiguous"] / median["planner"],
        "speedup_vs_padded_allgather": median["lpt"] / median["planner"],
        "fetch_ratio": fetched["planner"] / fetch_all,
        "fetch_ratio_token_owner": fetched["token_owner"] / fetch_all,
        "fetch_ratio_allgather": fetched["contiguous"] / fetch_all,
        "a2a_over_allgather": sum(int(r.counts.sum() - np.trace(r.counts)) for r in routings)
        / ((world - 1) * rows_all),
        "imbalance_planner": plan.imbalance,
        "imbalance_token_owner": _imbalance(owner_loads),
        "token_owner_makespan": float(owner_loads.max() / (costs.sum() / world)),
        "imbalance_contiguous": _imbalance(np.bincount(contiguous_ranks(costs, world), weights=costs, minlength=world)),
        "imbalance_lpt": _imbalance(np.bincount(lpt_ranks(costs, world), weights=costs, minlength=world)),
        "outputs_match": True,
    }


class _Schemes:
    """The four schemes on one rank; each returns this rank's rows of every micro-batch, in
    buffer (window) order."""

    def __init__(self, layout: Layout, rank: int, store, encoder, images: StepImages) -> None:
        self.layout, self.rank, self.encoder, self.images = layout, rank, encoder, images
        self.fetcher = PixelFetcher(store, rank)
        self.step_encoder = StepEncoder(encoder, store, layout, rank)
        self.items = {item.content_hash: item for item in images.items}  # distinct, first-seen order
        self.hashes = list(self.items)
        self.costs = np.array([encoder.cost(self.items[h]) for h in self.hashes])

    def planner(self) -> list:
        """(a): ``StepEncoder``: plan, fetch own pixels, encode, one all-to-all per micro-batch."""
        encoded = self.step_encoder.encode(self.images)
        return [encoded.embeddings(i) for i in range(len(self.images.micro_batches))]

    def token_owner(self) -> list:
        """(b): encode every image this rank holds rows of, once; nothing moves."""
        mbs = self.images.micro_batches
        held = dict.fromkeys(p.content_hash for mb in mbs for p in mb.pieces if p.dest_rank == self.rank)
        return self._select(*self._encode(list(held)))

    def gathered(self, assign: Callable[[np.ndarray, int], np.ndarray]) -> list:
        """(c)/(d): every rank loads every image's pixels, encodes those ``assign`` gives it, pads
        its rows to the largest rank's count and all-gathers (gloo gathers equal sizes only)."""
        world = self.layout.world_size
        ranks = assign(self.costs, world)
        pixels = dict(zip(self.hashes, self.fetcher.fetch_images(self.hashes), strict=True))
        local, _ = self._encode([h for h, r in zip(self.hashes, ranks) if r == self.rank], pixels)
        rows = [self.items[h].num_tokens for h in self.hashes]
        counts = np.bincount(ranks, weights=rows, minlength=world).astype(np.int64)
        padded = local.new_zeros(int(counts.max()), local.shape[1])  # (max rank rows, H)
        padded[: local.shape[0]] = local
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        order = sorted(range(len(self.hashes)), key=lambda i: (ranks[i], i))  # rank by rank, each in order
        starts = np.cumsum([0] + [rows[i] for i in order])[:-1].tolist()
        gathered = torch.cat([part[:n] for part, n in zip(parts, counts.tolist(), strict=True)])
        return self._select(gathered, {self.hashes[i]: start for i, start in zip(order, starts, strict=True)})

    def close(self) -> None:
        self.step_encoder.close()
        self.fetcher.close()

    def _encode(self, mine: list[str], pixels: dict[str, np.ndarray] | None = None):
        """Rows of the images ``mine`` in order in one forward (fetching their pixels unless
        given), and the row where each image starts."""
        starts = dict(zip(mine, np.cumsum([0] + [self.items[h].num_tokens for h in mine])[:-1].tolist()))
        if not mine:
            return torch.zeros(0, self.encoder.hidden_size), starts
        if pixels is None:
            pixels = dict(zip(mine, self.fetcher.fetch_images(mine), strict=True))
        inputs = [self.encoder.preprocess(np.asarray(pixels[h])) for h in mine]
        return self.encoder(self.encoder.collate(inputs)), starts

    def _select(self, rows, starts: dict[str, int]) -> list:
        """This rank's rows of each micro-batch out of ``rows``, where image ``h`` starts at ``starts[h]``."""
        out = []
        for mb in self.images.micro_batches:
            mine = sorted((p for p in mb.pieces if p.dest_rank == self.rank), key=lambda p: p.dest_offset)
            index = [np.arange(p.num_rows) + starts[p.content_hash] + p.row_start for p in mine]
            out.append(rows.index_select(0, torch.as_tensor(np.concatenate(index) if index else np.zeros(0, np.int64))))
        return out


# ---- the benchmark ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Size:
    layouts: tuple[tuple[int, int, int], ...]
    """(DP, CP, TP) of the metadata instances."""
    items_per_rank: tuple[int, ...]
    """Distinct screenshots per rank of a step."""
    seeds: tuple[int, ...]
    wall: WallSpec


SIZES = {
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
