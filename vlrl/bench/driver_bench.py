"""``vlrl bench driver``: driver memory when it schedules on metadata vs when it gathers payloads.

Sequences are multi-turn GUI trajectories: 4k tokens with logprobs and masks and 15 screenshots
at 1280x720. The metadata driver (payloads in a ``RayStore``, the driver holds ``SeqMeta``) and
the gathering driver (token columns plus processed float32 ``pixel_values``, 322 MiB a sequence,
in the driver's process) are both measured, never extrapolated, at the same batch sizes B, each
run in a fresh spawned process (``driver_runs``); the largest gathered batch stays under
``CAP_BYTES`` so that it fits on this machine. The metadata driver is also run alone at a larger B.

Figures (MiB; ``driver_*_mb_*`` are dicts keyed by ``str(B)`` for every B of ``batch_sizes``):

- ``driver_rss_mb_metadata`` / ``driver_rss_mb_gather``: RSS increase of the driver process
  while it holds the batch, over its own baseline taken after imports, Ray connect and a warm-up
  group; ``driver_pss_mb_*`` the same in PSS. ``runs`` has every run's absolute figures;
- ``object_store_mb`` and ``store_shards_rss_mb``: where the metadata driver's payloads live
  instead (Ray's shared-memory store, and the store shards' processes, which keep objects under
  Ray's inline threshold in their own memory), as increases over the same baseline;
- ``driver_mem_ratio``: metadata / gather RSS increase at the largest common B;
- ``per_sequence_mb``: gather, the slope between the smallest and largest B; metadata, the
  increase at the metadata-only B divided by B (fixed costs included: an upper bound);
  ``projected_max_batch_in_64gib`` divides 64 GiB by these slopes, a projection, not a measurement;
- ``hook_s``: the accept-time hook's time per group, ``{min, median, max}``.
"""

from __future__ import annotations

import multiprocessing as mp
import uuid
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import ray

from vlrl.bench.driver_runs import (
    GROUP,
    HEIGHT,
    SCREENSHOTS,
    TOKENS,
    WIDTH,
    WRITER_NAMESPACE,
    RolloutWriter,
    measure_run,
    patches_per_image,
    pixel_values_bytes,
)
from vlrl.bench.spread import spread

CAP_BYTES = 12 * 1024**3
"""Most a gathered batch may hold here (the machine has 24 GiB, shared)."""
MIB = 2**20


def _largest_gather_batch() -> int:
    return CAP_BYTES // pixel_values_bytes() // GROUP * GROUP


SIZES = {
    "smoke": {"batch_sizes": (2, 4), "metadata_only": 64},
    "small": {"batch_sizes": (2, 8, 16), "metadata_only": 512},
    "full": {"batch_sizes": (2, 8, 16, _largest_gather_batch()), "metadata_only": 4096},
}


def _in_fresh_process(*args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(measure_run, *args).result()


def _increase(runs: dict[int, dict[str, Any]], figure: str) -> dict[str, float]:
    return {str(b): run["increase"][figure] for b, run in runs.items()}


def run(size: str) -> dict[str, Any]:
    batch_sizes, metadata_only = SIZES[size]["batch_sizes"], SIZES[size]["metadata_only"]
    if max(batch_sizes) * pixel_values_bytes() > CAP_BYTES:
        raise ValueError(f"batch_sizes {batch_sizes}: the largest gathered batch exceeds {CAP_BYTES / 2**30:g} GiB")
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=1024**3, log_to_driver=False)
    writer_name = f"writer-{uuid.uuid4().hex[:8]}"
    writer = RolloutWriter.options(name=writer_name, namespace=WRITER_NAMESPACE).remote()
    address = ray.get_runtime_context().gcs_address
    try:
        ray.get(writer.__ray_ready__.remote())
        runs = {
            driver: {b: _in_fresh_process(driver, b, address, writer_name) for b in batch_sizes}
            for driver in ("metadata", "gather")
        }
        alone = _in_fresh_process("metadata", metadata_only, address, writer_name)
    finally:
        ray.kill(writer)
        if started_ray:
            ray.shutdown()
    largest, smallest = max(batch_sizes), min(batch_sizes)
    meta_rss, gather_rss = _increase(runs["metadata"], "rss_mb"), _increase(runs["gather"], "rss_mb")
    per_sequence = {
        "metadata": alone["increase"]["rss_mb"] / metadata_only,
        "gather": (gather_rss[str(largest)] - gather_rss[str(smallest)]) / (largest - smallest),
    }
    hook_s = {d: spread([s for r in runs[d].values() for s in r.pop("hook_s")]) for d in runs}
    rows, cols = patches_per_image()
    return {
        "sequence": {
            "tokens": TOKENS,
            "screenshots": SCREENSHOTS,
            "resolution": f"{WIDTH}x{HEIGHT}",
            "pixel_values_per_image": [rows, cols],
            "pixel_values_mb": pixel_values_bytes() / MIB,
        },
        "batch_sizes": list(batch_sizes),
        "driver_rss_mb_metadata": meta_rss,
        "driver_rss_mb_gather": gather_rss,
        "driver_pss_mb_metadata": _increase(runs["metadata"], "pss_mb"),
        "driver_pss_mb_gather": _increase(runs["gather"], "pss_mb"),
        "object_store_mb": {d: _increase(runs[d], "object_store_mb") for d in runs},
        "store_shards_rss_mb": _increase(runs["metadata"], "store_shards_rss_mb"),
        "metadata_only": {"batch": metadata_only, **{k: alone[k] for k in ("baseline", "holding", "increase")}},
        "driver_mem_ratio": meta_rss[str(largest)] / gather_rss[str(largest)],
        "per_sequence_mb": per_sequence,
        "projected_max_batch_in_64gib": {d: int(64 * 1024 / mb) if mb > 0 else None for d, mb in per_sequence.items()},
        "hook_s": hook_s,
        "runs": {d: {str(b): r for b, r in runs[d].items()} for d in runs},
    }
