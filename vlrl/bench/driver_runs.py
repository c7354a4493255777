"""One run of ``vlrl bench driver``: a driver holds a batch of B sequences, in a fresh process.

Each run is its own spawned process (``measure_run``), so no earlier run's allocations or freed
arenas mask its own. The process imports everything, connects to the bench's Ray cluster, builds
its store and pushes one warm-up group through the same path (then deletes it); only then is its
baseline taken: RSS and PSS from ``/proc`` (Ray's C++ core worker included), the Ray object
store's used bytes and the store shards' RSS. It then builds the batch group by group, running the
real ``GroupHook`` on each group, and measures again while it holds every group.

- **metadata** driver: a rollout-host actor writes each sequence's token payload into a
  ``RayStore``; the driver holds only ``SeqMeta`` records (with their ``MMItemMeta``) and the
  hook's decisions; the hook reads the ``loss_mask`` column and writes ``advantages`` back.
- **gather** driver: the driver holds every sequence's payload in its own process, as verl and
  AReaL hold a gathered batch: token ids, logprobs, mask and advantages (in a ``LocalStore``,
  where the same hook reads and writes them) and, beside them, the processed ``pixel_values`` of
  its screenshots, float32 patches of shape
  ``(grid_t * grid_h * grid_w, 3 * temporal_patch_size * patch_size**2)`` per image as the
  Qwen2-VL image processor makes them (``PatchRule`` gives the grid), concatenated over the
  sequence's images, with ``image_grid_thw``.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import numpy as np
import ray

from vlrl.bench.proc_memory import memory_mb
from vlrl.mm import PatchRule
from vlrl.records import LOGPROBS, LOSS_MASK, TOKEN_IDS, MMItemMeta, SeqMeta, image_store_key

TOKENS = 4096
SCREENSHOTS = 15
WIDTH, HEIGHT = 1280, 720
GROUP = 8
RULE = PatchRule()
PIXEL_VALUES = "pixel_values"
IMAGE_GRID_THW = "image_grid_thw"
WRITER_NAMESPACE = "vlrl-bench-driver"


def patches_per_image() -> tuple[int, int]:
    """``(rows, cols)`` of one screenshot's ``pixel_values``: one row per vision patch, each row
    the 3 channels x ``temporal_patch_size`` frames x ``patch_size``^2 pixels of that patch."""
    t, gh, gw = RULE.grid(WIDTH, HEIGHT)
    return t * gh * gw, 3 * RULE.temporal_patch_size * RULE.patch_size**2


def pixel_values_bytes() -> int:
    """Bytes of one sequence's float32 ``pixel_values`` (all its screenshots)."""
    rows, cols = patches_per_image()
    return SCREENSHOTS * rows * cols * 4


def seq_meta(index: int, group: str, group_size: int) -> SeqMeta:
    rng = np.random.default_rng(index)
    hashes = [f"{rng.integers(0, 2**63):016x}{rng.integers(0, 2**63):016x}" for _ in range(SCREENSHOTS)]
    images = tuple(
        MMItemMeta(
            content_hash=h, width=WIDTH, height=HEIGHT, nbytes=WIDTH * HEIGHT * 3, store_key=image_store_key(h)
        ).with_patch_rule(RULE)
        for h in hashes
    )
    per_turn = TOKENS // SCREENSHOTS
    return SeqMeta(
        key=f"seq/{group}/{index}",
        group_id=group,
        source="desktop",
        sample_index=index % group_size,
        reward=float(index % 2),  # both rewards in every group: the hook accepts it and writes advantages
        success=bool(index % 2),
        finish="done",
        turns=SCREENSHOTS,
        num_tokens=TOKENS,
        num_response_tokens=TOKENS // 4,
        context_lengths=tuple(per_turn * (t + 1) - 8 for t in range(SCREENSHOTS)),
        policy_version=0,
        images=images,
        image_offsets=tuple((per_turn * t + 10, t) for t in range(SCREENSHOTS)),
    )


def rollout_payload(seed: int) -> dict[str, np.ndarray]:
    """The token columns a rollout writes for one sequence."""
    rng = np.random.default_rng(seed)
    return {
        TOKEN_IDS: rng.integers(0, 151_000, TOKENS).astype(np.int32),
        LOGPROBS: -rng.exponential(1.0, TOKENS).astype(np.float32),
        LOSS_MASK: rng.random(TOKENS) < 0.25,
    }


def multimodal_inputs(seed: int, image_patches: np.ndarray) -> dict[str, np.ndarray]:
    """The processed images of one sequence, as a gathering driver holds them next to its tokens."""
    rows, cols = image_patches.shape
    pixel_values = np.empty((SCREENSHOTS * rows, cols), np.float32)  # (sum of patches, 1176)
    for image in pixel_values.reshape(SCREENSHOTS, rows, cols):  # every page written, no temporaries
        np.add(image_patches, np.float32(seed % 7), out=image)
    grid = np.array([RULE.grid(WIDTH, HEIGHT)] * SCREENSHOTS, np.int64)  # (images, 3)
    return {PIXEL_VALUES: pixel_values, IMAGE_GRID_THW: grid}


@ray.remote(num_cpus=0)
class RolloutWriter:
    """The rollout side of the metadata driver: writes each sequence's payload into the store."""

    def write(self, store: Any, keys: list[str], seeds: list[int]) -> int:
        for key, seed in zip(keys, seeds):
            store.put(key, rollout_payload(seed))
        return len(keys)


def object_store_used_bytes() -> int:
    """Bytes in use in the Ray object store (shared memory), summed over the cluster's nodes."""
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address

    reply = get_memory_info_reply(get_state_from_address(ray.get_runtime_context().gcs_address))
    return int(reply.store_stats.object_store_bytes_used)


def store_shard_pids(config: Any) -> list[int]:
    """Process ids of the index/owner shards of the ``RayStore`` built from ``config``."""
    from vlrl.store.remote_index import RAY_NAMESPACE

    names = [f"ray-store/{config.namespace}/{i}" for i in range(config.shards)]
    shards = [ray.get_actor(name, namespace=RAY_NAMESPACE) for name in names]
    return ray.get([s.__ray_call__.remote(lambda _: os.getpid()) for s in shards])


def _snapshot(shard_pids: list[int]) -> dict[str, float]:
    gc.collect()
    out = memory_mb()
    out["object_store_mb"] = object_store_used_bytes() / 2**20
    out["store_shards_rss_mb"] = sum(memory_mb(pid)["rss_mb"] for pid in shard_pids)
    return out


def measure_run(driver: str, batch: int, address: str, writer_name: str) -> dict[str, Any]:
    """Memory of a ``driver`` (``metadata`` or ``gather``) holding ``batch`` sequences: the baseline,
    the figures while it holds them, and their increase (MiB); per-group hook times (s)."""
    import uuid

    from vlrl.control.group_hook import GroupHook
    from vlrl.store.local import LocalStore
    from vlrl.store.ray_store import RayStore

    ray.init(address=address, log_to_driver=False)
    group_size = min(batch, GROUP)
    hook = GroupHook.Config().build()
    if driver == "metadata":
        config = RayStore.Config(namespace=f"bench-driver-{uuid.uuid4().hex[:8]}")
        store = config.build()
        writer = ray.get_actor(writer_name, namespace=WRITER_NAMESPACE)
        shard_pids = store_shard_pids(config)
    else:
        store = LocalStore()
        image_patches = np.random.default_rng(0).standard_normal(patches_per_image(), dtype=np.float32)
        shard_pids = []
    images: dict[str, dict[str, np.ndarray]] = {}  # gather: key -> pixel_values, image_grid_thw

    def hold_group(name: str, first: int, size: int) -> tuple[list[SeqMeta], Any, float]:
        metas = [seq_meta(first + i, name, size) for i in range(size)]
        if driver == "metadata":
            ray.get(writer.write.remote(store, [m.key for m in metas], [first + i for i in range(size)]))
        else:
            for i, meta in enumerate(metas):
                store.put(meta.key, rollout_payload(first + i))
                images[meta.key] = multimodal_inputs(first + i, image_patches)
        started = time.perf_counter()
        decision = hook(metas, store)
        return metas, decision, time.perf_counter() - started

    warm, _, _ = hold_group("warm-up", 10**6, 2)  # first calls outside the measurement
    store.delete([m.key for m in warm])
    images.clear()
    del warm
    _snapshot(shard_pids)  # its own first calls (a GCS client, gRPC channels) stay out of the increase
    baseline = _snapshot(shard_pids)
    held = [hold_group(f"g{g}", g * group_size, group_size) for g in range(batch // group_size)]
    holding = _snapshot(shard_pids)
    accepted = sum(decision.accepted for _, decision, _ in held)
    store.delete([m.key for metas, _, _ in held for m in metas])
    images.clear()
    if driver == "metadata":
        store.destroy()
    ray.shutdown()
    return {
        "sequences": batch,
        "groups": len(held),
        "accepted_groups": accepted,
        "baseline": baseline,
        "holding": holding,
        "increase": {name: holding[name] - baseline[name] for name in baseline},
        "hook_s": [seconds for _, _, seconds in held],
    }
