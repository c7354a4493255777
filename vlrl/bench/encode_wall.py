"""The encode benchmark's wall times: the four schemes side by side in a 4-process gloo world.

The world runs on CPU (one thread per rank) with a small Qwen2-VL tower on the same trajectories
at 1/6 of the screen side (``WALL_WORKLOAD``). Each rank's ``LocalStore`` holds every screenshot
and counts the bytes it reads. A scheme's time is from a barrier to this rank holding every
micro-batch's embeddings (planning, fetch, preprocess, encode, communication, selecting rows),
maxed over ranks; the median over repetitions is kept, schemes rotated within each. Forward only
(no grad). ``speedup_vs_*`` is a baseline's median time over the planner's. Ratios are the
result, never absolute times.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from encoders.qwen2vl import Qwen2VLEncoder
from vlrl.bench.encode_baselines import contiguous_ranks, imbalance, lpt_ranks
from vlrl.bench.encode_workload import (
    SCREENS,
    WALL_WORKLOAD,
    WORLD4_LAYOUTS,
    Workload,
    build_metas,
    draw_trajectories,
    place,
)
from vlrl.bench.spawned_rank import exit_rank
from vlrl.mm import store_image
from vlrl.pack import Layout
from vlrl.records import MMItemMeta
from vlrl.store import LocalStore
from vlrl.train.encode_step import StepEncoder
from vlrl.train.pixel_fetch import fetch_pixels
from vlrl.train.step_images import StepImages


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
        store = LocalStore(image_tile_px=None)  # raw rows: the bench's fetch figures are pixel bytes

        def describe(image_id: int, screen: str) -> MMItemMeta:
            width, height = (side // workload.scale for side in SCREENS[screen][0])
            pixels = np.random.default_rng((spec.seed, image_id)).integers(0, 256, (height, width, 3), dtype=np.uint8)
            return store_image(store, pixels, holder="encode-bench", rule=workload.rule)

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
    exit_rank()


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
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m, name=name, i=i: f"{name} mb {i}: {m}")
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
        "imbalance_token_owner": imbalance(owner_loads),
        "token_owner_makespan": float(owner_loads.max() / (costs.sum() / world)),
        "imbalance_contiguous": imbalance(np.bincount(contiguous_ranks(costs, world), weights=costs, minlength=world)),
        "imbalance_lpt": imbalance(np.bincount(lpt_ranks(costs, world), weights=costs, minlength=world)),
        "outputs_match": True,
    }


class _Schemes:
    """The four schemes on one rank; each returns this rank's rows of every micro-batch, in
    buffer (window) order."""

    def __init__(self, layout: Layout, rank: int, store, encoder, images: StepImages) -> None:
        self.layout, self.rank, self.encoder, self.images = layout, rank, encoder, images
        self.store = store
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
        pixels = dict(zip(self.hashes, fetch_pixels(self.store, self.hashes, rank=self.rank), strict=True))
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

    def _encode(self, mine: list[str], pixels: dict[str, np.ndarray] | None = None):
        """Rows of the images ``mine`` in order in one forward (fetching their pixels unless
        given), and the row where each image starts."""
        starts = dict(zip(mine, np.cumsum([0] + [self.items[h].num_tokens for h in mine])[:-1].tolist()))
        if not mine:
            return torch.zeros(0, self.encoder.hidden_size), starts
        if pixels is None:
            pixels = dict(zip(mine, fetch_pixels(self.store, mine, rank=self.rank), strict=True))
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
