"""``vlrl bench driver``: driver memory when it schedules on metadata vs gathering payloads.

Sequences are realistic multi-turn GUI trajectories: 4k tokens with logprobs and masks and 15
screenshots at 1280x720. Runs, all measured with ``tracemalloc`` (the driver's Python heap, where
a gathered batch lives):

- **vlrl**: a Ray actor writes the payloads into the Ray store; the driver holds ``SeqMeta``
  records (with their ``MMItemMeta``) and runs the real accept-time hook on every group, which
  reads only the loss-mask column and writes advantages back;
- **gathering baseline**: the driver holds every sequence's payload (ids, logprobs, mask,
  advantages, screenshots), as drivers that gather batches do.

Reported per 10k sequences (the baseline is measured on a few sequences and scaled: holding 10k
of them would need ~400 GB), their ratio ``driver_mem_ratio``, and the largest batch each fits
in a fixed memory cap.
"""

from __future__ import annotations

import gc
import tracemalloc
import uuid
from typing import Any

import numpy as np

from vlrl.mm import PatchRule
from vlrl.records import ADVANTAGES, LOGPROBS, LOSS_MASK, PIXELS, TOKEN_IDS, MMItemMeta, SeqMeta, image_store_key

TOKENS = 4096
SCREENSHOTS = 15
WIDTH, HEIGHT = 1280, 720
GROUP = 8
SIZES = {
    "smoke": {"groups": 16, "baseline_sequences": 2},
    "small": {"groups": 64, "baseline_sequences": 4},
    "full": {"groups": 1250, "baseline_sequences": 8},
}
CAP_BYTES = 64 * 1024**3
RULE = PatchRule()


def seq_meta(index: int, group: int) -> SeqMeta:
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
        group_id=f"g{group}",
        source="desktop",
        sample_index=index % GROUP,
        reward=float(index % 2),
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


def payload(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        TOKEN_IDS: rng.integers(0, 151_000, TOKENS).astype(np.int32),
        LOGPROBS: -rng.exponential(1.0, TOKENS).astype(np.float32),
        LOSS_MASK: rng.random(TOKENS) < 0.25,
    }


def measure_vlrl(groups: int) -> dict[str, float]:
    """Peak driver heap while it holds every group's metadata and runs the hook on each group."""
    import ray

    from vlrl.control.group_hook import GroupHook
    from vlrl.store.ray_store import RayStore

    store = RayStore.Config(namespace=f"bench-driver-{uuid.uuid4().hex[:6]}").build()

    @ray.remote(num_cpus=0)
    def write(store: Any, keys: list[str]) -> int:
        for i, key in enumerate(keys):
            store.put(key, payload(i))
        return len(keys)

    hook = GroupHook.Config().build()
    try:
        gc.collect()
        tracemalloc.start()
        held = []
        for group in range(groups):
            metas = [seq_meta(group * GROUP + i, group) for i in range(GROUP)]
            ray.get(write.remote(store, [m.key for m in metas]))  # the rollout side writes payloads
            decision = hook(metas, store)
            held.append((metas, decision))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        store.delete([m.key for metas, _ in held for m in metas])
    finally:
        store.destroy()
    sequences = groups * GROUP
    return {"sequences": sequences, "peak_bytes": peak, "bytes_per_sequence": peak / sequences}


def measure_gathering(sequences: int) -> dict[str, float]:
    """Peak driver heap of a driver that gathers each sequence's payload with its metadata."""
    gc.collect()
    tracemalloc.start()
    held = []
    for index in range(sequences):
        row = payload(index)
        row[ADVANTAGES] = np.zeros(TOKENS, np.float32)
        row[PIXELS] = np.zeros((SCREENSHOTS, HEIGHT, WIDTH, 3), np.uint8)
        held.append((seq_meta(index, index // GROUP), row))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"sequences": sequences, "peak_bytes": peak, "bytes_per_sequence": peak / sequences}


def run(size: str) -> dict[str, Any]:
    import ray

    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=1024**3, log_to_driver=False)
    try:
        ours = measure_vlrl(SIZES[size]["groups"])
    finally:
        if started_ray:
            ray.shutdown()
    baseline = measure_gathering(SIZES[size]["baseline_sequences"])
    per_10k = {name: r["bytes_per_sequence"] * 10_000 for name, r in (("vlrl", ours), ("gathering", baseline))}
    return {
        "sequence": {"tokens": TOKENS, "screenshots": SCREENSHOTS, "resolution": f"{WIDTH}x{HEIGHT}"},
        "vlrl": ours,
        "gathering": baseline,
        "driver_mem_per_10k_mb": {name: value / 1e6 for name, value in per_10k.items()},
        "driver_mem_ratio": per_10k["vlrl"] / per_10k["gathering"],
        "max_batch_in_64gib": {
            "vlrl": int(CAP_BYTES // ours["bytes_per_sequence"]),
            "gathering": int(CAP_BYTES // baseline["bytes_per_sequence"]),
        },
    }
