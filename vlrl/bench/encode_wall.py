"""The encode benchmark's wall run: the schemes side by side in a 4-process gloo world, measured.

The world runs on CPU (one thread per rank) with a small Qwen2-VL tower on the same trajectories
at 1/6 of the screen side (``WALL_WORKLOAD``), in GRPO groups whose members share their first
screenshot (``WallSpec.group_size``), so a step repeats images and the planner's dedup is exercised.
Each rank's ``LocalStore`` holds every screenshot and counts the bytes it reads. The schemes are
those of ``encode_schemes``; per layout:

1. **Check round** (untimed): the reference rows, then every scheme once, counting on each rank
   the bytes read from the store, the bytes at the collectives (``CollectiveBytes``: what
   ``all_to_all_single`` / ``all_gather`` really carried between ranks) and the encoder's real
   invocations (``EncoderMeter``), summed (bytes, calls) or maxed (fetch) over ranks. Every
   scheme's rows are compared with the reference (``outputs_match``, ``max_abs_diff``). The
   planner also runs on the same step with every repeat replaced by a distinct screenshot of
   the same screen (``planner_no_dedup``): what dedup saves, counted in encoder images and rows.
2. **Timed rounds** (``reps``, schemes rotated): a scheme's time runs from a barrier to this rank
   holding every micro-batch's embeddings (planning, fetch, preprocess, encode, communication,
   selecting rows), maxed over ranks. Forward only (no grad). ``speedup_vs_*`` is a baseline's
   time over the planner's in the same round, as ``{min, median, max}`` over rounds; ``_sp`` are
   the per-replica baselines (the fair comparison), ``_world`` the world-wide fetch-all ones.
3. **Cost model**: each rank's measured encoder forward seconds (median over rounds) against the
   cost the planner predicted for it (``ViTCost`` of the tower), for the planner and for the
   token owner (whose loads are uneven): both max/mean and their correlation over ranks.

Ratios are the result, never absolute times: the machine's cores are shared.
"""

from __future__ import annotations

import json
import tempfile
import time
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
from vlrl.bench.collective_bytes import CollectiveBytes
from vlrl.bench.encode_baselines import contiguous_ranks, imbalance, lpt_ranks, over_lower_bound
from vlrl.bench.encode_schemes import Schemes
from vlrl.bench.encode_workload import (
    SCREENS,
    WALL_WORKLOAD,
    WORLD4_LAYOUTS,
    Workload,
    build_metas,
    draw_trajectories,
    place,
)
from vlrl.bench.encoder_calls import EncoderMeter
from vlrl.bench.spawned_rank import exit_rank
from vlrl.bench.spread import spread
from vlrl.mm import store_image
from vlrl.pack import Layout
from vlrl.records import MMItemMeta
from vlrl.store import LocalStore
from vlrl.train.encode_step import StepEncoder
from vlrl.train.step_images import StepImages

TIMED = ("planner", "token_owner", "contiguous_sp", "lpt_sp", "contiguous_world", "lpt_world")
BASELINES = {  # figure suffix -> scheme
    "token_owner": "token_owner",
    "allgather_sp": "contiguous_sp",
    "padded_allgather_sp": "lpt_sp",
    "allgather_world": "contiguous_world",
    "padded_allgather_world": "lpt_world",
}
TOLERANCE = 1e-4
"""rtol and atol of a scheme's rows against the reference's (batching changes float sums)."""


@dataclass(frozen=True, slots=True)
class WallSpec:
    """The timed run: one step of ``n_images`` screenshot occurrences per layout, ``reps`` timed rounds."""

    n_images: int
    reps: int
    seed: int = 0
    group_size: int = 2
    """GRPO group members on one device sharing their first screenshot."""
    layouts: tuple[tuple[int, int, int], ...] = WORLD4_LAYOUTS
    workload: Workload = WALL_WORKLOAD
    encoder: tuple[tuple[str, Any], ...] = (
        ("depth", 4), ("embed_dim", 128), ("hidden_size", 256), ("num_heads", 4), ("mlp_ratio", 4),
    )  # fmt: skip
    """Fields of the small ``Qwen2VLEncoder.Config`` (its patch rule is the workload's)."""


def wall(spec: WallSpec, world: int = 4) -> dict[str, Any]:
    """Run and measure the schemes in a ``world``-process gloo world on CPU."""
    with tempfile.TemporaryDirectory(prefix="vlrl-encode-bench-") as tmp:
        out = Path(tmp) / "result.json"
        mp.spawn(_rank_main, args=(world, str(Path(tmp) / "rdzv"), str(out), spec), nprocs=world, join=True)
        return json.loads(out.read_text())


def _rank_main(rank: int, world: int, rdzv: str, out: str, spec: WallSpec) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world, timeout=timedelta(seconds=300)
    )
    collectives = CollectiveBytes().install()
    try:
        workload = spec.workload
        store = LocalStore(image_tile_px=None)  # raw rows: the bench's fetch figures are pixel bytes

        def describe(image_id: int, screen: str) -> MMItemMeta:
            width, height = (side // workload.scale for side in SCREENS[screen][0])
            pixels = np.random.default_rng((spec.seed, image_id)).integers(0, 256, (height, width, 3), dtype=np.uint8)
            return store_image(store, pixels, holder="encode-bench", rule=workload.rule)

        def step(share_first: bool):
            trajectories = draw_trajectories(
                spec.n_images, spec.seed, group_size=spec.group_size, share_first=share_first,
                max_turns=workload.max_turns,
            )  # fmt: skip
            return build_metas(trajectories, workload, describe, spec.seed)

        # The same draw either way (turns, screens, text): only the repeats become distinct images.
        metas, metas_no_dedup = step(share_first=True), step(share_first=False)
        torch.manual_seed(0)
        encoder = Qwen2VLEncoder.Config(**dict(spec.encoder), patch_rule=workload.rule).build().eval()
        meter = EncoderMeter(encoder)
        results = {}
        for shape in spec.layouts:
            layout = Layout(*shape)
            layout.check_world(world)
            replicas = [[r for r in range(world) if layout.coords(r).dp == dp] for dp in range(layout.dp)]
            groups = [dist.new_group(ranks) for ranks in replicas]  # every rank creates every group, in order
            run = _LayoutRun(layout, rank, store, encoder, meter, collectives, groups)
            name = "x".join(map(str, shape))
            images, images_no_dedup = place(metas, layout, workload), place(metas_no_dedup, layout, workload)
            results[name] = run.measure(images, images_no_dedup, spec.reps)
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        collectives.uninstall()
        dist.destroy_process_group()
    exit_rank()


COUNTS = ("fetched", "bytes", "calls", "images", "rows")
"""What the check round counts per scheme and rank: store bytes read, bytes received at the
collectives, encoder calls, images and rows."""


class _LayoutRun:
    """One layout's check round, timed rounds and figures on one rank (collective throughout)."""

    def __init__(
        self, layout: Layout, rank: int, store, encoder, meter: EncoderMeter, collectives: CollectiveBytes, groups
    ) -> None:
        self.layout, self.rank, self.store, self.encoder = layout, rank, store, encoder
        self.meter, self.collectives, self.groups = meter, collectives, groups

    def measure(self, images: StepImages, images_no_dedup: StepImages, reps: int) -> dict[str, Any]:
        schemes = Schemes(self.layout, self.rank, self.store, self.encoder, images, self.groups)
        runs: dict[str, Callable[[], list]] = {
            "planner": schemes.planner,
            "token_owner": schemes.token_owner,
            "contiguous_sp": lambda: schemes.gathered(contiguous_ranks, sp=True),
            "lpt_sp": lambda: schemes.gathered(lpt_ranks, sp=True),
            "contiguous_world": lambda: schemes.gathered(contiguous_ranks, sp=False),
            "lpt_world": lambda: schemes.gathered(lpt_ranks, sp=False),
        }
        no_dedup = StepEncoder(self.encoder, self.store, self.layout, self.rank)
        with torch.no_grad():
            want = schemes.reference()
            local, errors = {}, {}
            for name, scheme in runs.items():  # the check round
                got, local[name] = self._counted(scheme)
                errors[name] = compare_rows(got, want)
            _, local["planner_no_dedup"] = self._counted(lambda: _all_embeddings(no_dedup, images_no_dedup))
            times, encoder_s = self._timed_rounds(runs, reps)
        schemes.close()
        no_dedup.close()
        names = list(local)
        summed = torch.tensor(np.stack([local[n] for n in names]))  # (schemes, COUNTS)
        dist.all_reduce(summed)
        worst = torch.tensor(np.stack([local[n] for n in names]))
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        bad = torch.tensor(np.stack([errors[n] for n in runs]))  # (schemes, 3)
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        counts = {n: dict(zip(COUNTS, summed[i].tolist())) for i, n in enumerate(names)}
        for i, n in enumerate(names):
            counts[n]["fetched"] = float(worst[i, 0])  # the busiest rank's
        row_bytes = want[0].shape[1] * want[0].element_size()
        return self._figures(images, schemes, counts, dict(zip(runs, bad.tolist())), times, encoder_s, row_bytes)

    def _counted(self, scheme: Callable[[], list]) -> tuple[list, np.ndarray]:
        """Run ``scheme`` once: its rows and this rank's ``COUNTS``."""
        before = self.store.io_stats().bytes_read
        calls = self.meter.start()
        with self.collectives.counting() as traffic:
            rows = scheme()
        fetched = self.store.io_stats().bytes_read - before
        return rows, np.array([fetched, traffic.received, calls.calls, calls.images, calls.rows], dtype=np.float64)

    def _timed_rounds(self, runs, reps: int):
        """``reps`` rounds, the order rotated; each scheme's slowest-rank time per round, and each
        rank's encoder forward seconds per round for the planner and the token owner."""
        times: dict[str, list[float]] = {name: [] for name in TIMED}
        encoder_s = {name: np.zeros((self.layout.world_size, reps)) for name in ("planner", "token_owner")}
        for rep in range(reps):
            for name in TIMED[rep % len(TIMED) :] + TIMED[: rep % len(TIMED)]:
                dist.barrier()
                calls = self.meter.start()
                start = time.perf_counter()
                runs[name]()
                slowest = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                times[name].append(float(slowest))
                if name in encoder_s:
                    encoder_s[name][self.rank, rep] = calls.seconds
        for seconds in encoder_s.values():
            summed = torch.tensor(seconds)
            dist.all_reduce(summed)  # every rank filled its own row
            seconds[:] = summed.numpy()
        return times, encoder_s

    def _figures(self, images, schemes, counts, errors, times, encoder_s, row_bytes) -> dict[str, Any]:
        world = self.layout.world_size
        plan, routings = schemes.step_encoder.plan(images)
        fetch_all = sum(item.nbytes for item in schemes.items.values())
        a2a, sp, padded_sp = (counts[n]["bytes"] for n in ("planner", "contiguous_sp", "lpt_sp"))
        owner_loads = np.zeros(world)
        for content_hash, ranks in images.owners().items():
            owner_loads[sorted(ranks)] += schemes.costs[schemes.hashes.index(content_hash)]
        planner, no_dedup = counts["planner"], counts["planner_no_dedup"]
        return {
            "images": len(schemes.hashes),
            "occurrences": len(images.items),
            "micro_batches": len(images.micro_batches),
            "time_s": {name: spread(t) for name, t in times.items()},
            **{
                f"speedup_vs_{key}": spread([b / a for a, b in zip(times["planner"], times[name], strict=True)])
                for key, name in BASELINES.items()
            },
            "a2a_bytes_measured": int(a2a),
            "a2a_bytes_planned": int(sum(int(r.counts.sum() - np.trace(r.counts)) for r in routings)) * row_bytes,
            "allgather_sp_bytes_measured": int(sp),
            "padded_allgather_sp_bytes_measured": int(padded_sp),
            "allgather_world_bytes_measured": int(counts["contiguous_world"]["bytes"]),
            "padded_allgather_world_bytes_measured": int(counts["lpt_world"]["bytes"]),
            "a2a_over_allgather_sp": a2a / sp if sp else None,
            "a2a_over_padded_allgather_sp": a2a / padded_sp if padded_sp else None,
            "fetch_ratio": counts["planner"]["fetched"] / fetch_all,
            "fetch_ratio_token_owner": counts["token_owner"]["fetched"] / fetch_all,
            "fetch_ratio_allgather_sp": counts["contiguous_sp"]["fetched"] / fetch_all,
            "fetch_ratio_padded_allgather_sp": counts["lpt_sp"]["fetched"] / fetch_all,
            "encoder": {name: {key: int(c[key]) for key in ("calls", "images", "rows")} for name, c in counts.items()},
            "dedup": {
                "distinct_images": len(schemes.hashes),
                "occurrences": len(images.items),
                "images_encoded": int(planner["images"]),
                "images_encoded_no_dedup": int(no_dedup["images"]),
                "rows_encoded": int(planner["rows"]),
                "rows_encoded_no_dedup": int(no_dedup["rows"]),
                "encoder_calls": int(planner["calls"]),
                "encoder_calls_no_dedup": int(no_dedup["calls"]),
            },
            "imbalance_planner": plan.imbalance,
            "imbalance_vs_lower_bound": over_lower_bound(plan.loads, schemes.costs),
            "encode_time_vs_cost": {
                "planner": _against_cost(encoder_s["planner"], plan.loads),
                "token_owner": _against_cost(encoder_s["token_owner"], owner_loads),
            },
            "max_abs_diff": {name: None if shape_bad else diff for name, (_, shape_bad, diff) in errors.items()},
            "outputs_match": not any(off for off, _, _ in errors.values()),
        }


def _all_embeddings(step_encoder: StepEncoder, images: StepImages) -> list:
    encoded = step_encoder.encode(images)
    return [encoded.embeddings(i) for i in range(len(images.micro_batches))]


def compare_rows(got: list[torch.Tensor], want: list[torch.Tensor]) -> np.ndarray:
    """``(off, shape differs, max |got - want|)`` over the micro-batches; ``off`` is 1.0 when a
    shape differs or a value is off by more than ``TOLERANCE``."""
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        return np.array([1.0, 1.0, 0.0])
    diff = max((float((g - w).abs().max()) for g, w in zip(got, want) if w.numel()), default=0.0)
    close = all(torch.allclose(g, w, rtol=TOLERANCE, atol=TOLERANCE) for g, w in zip(got, want))
    return np.array([0.0 if close else 1.0, 0.0, diff])


def _against_cost(seconds: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    """Measured encoder seconds per rank (``(world, rounds)``, median over rounds) against the
    cost model's prediction per rank."""
    measured = np.median(seconds, axis=1)
    varied = measured.std() > 0 and np.std(predicted) > 0
    return {
        "measured_s_per_rank": measured.tolist(),
        "predicted_cost_per_rank": [float(c) for c in predicted],
        "measured_max_over_mean": imbalance(measured),
        "predicted_max_over_mean": imbalance(np.asarray(predicted)),
        "correlation": float(np.corrcoef(measured, predicted)[0, 1]) if varied else None,
    }
