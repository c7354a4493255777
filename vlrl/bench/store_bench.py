"""``vlrl bench store``: the payload store on realistic rollout rows, per backend.

A row is one 4k-token multi-turn sequence: token ids, logprobs, a loss mask and 15 screenshots
at 1280x720 (about 41 MB, almost all pixels). Rows are written by the driver and read by a
separate reader actor (for the distributed backends), as a packer or an encoder rank would.

Figures per backend:
- ``put_mb_s`` / ``get_mb_s``: payload throughput of whole-row writes and reads, ``{min, median,
  max}`` over ``REPS`` rounds (backends rotated within each, after one untimed warm-up round);
- ``projection_ratio``: bytes moved by reading one field (logprobs) / bytes of a full-row read;
- ``range_ratio``: bytes moved by reading a quarter of the tokens of one field / a full-row read;
- ``range_over_field``: the same range read / reading that whole field (chunking overhead:
  an unaligned range also moves the rest of the chunks it touches).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from vlrl.bench.spread import spread
from vlrl.records import LOGPROBS, LOSS_MASK, PIXELS, TOKEN_IDS

TOKENS = 4096
SCREENSHOTS = 15
HEIGHT, WIDTH = 720, 1280
ROWS = {"smoke": 2, "small": 4, "full": 16}
REPS = {"smoke": 2, "small": 5, "full": 5}


def make_row(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        TOKEN_IDS: rng.integers(0, 151_000, TOKENS).astype(np.int32),
        LOGPROBS: -rng.exponential(1.0, TOKENS).astype(np.float32),
        LOSS_MASK: rng.random(TOKENS) > 0.3,
        PIXELS: rng.integers(0, 256, (SCREENSHOTS, HEIGHT, WIDTH, 3), dtype=np.uint8),
    }


def measure_reads(store: Any, keys: list[str]) -> dict[str, float]:
    """Whole-row read throughput and the bytes moved by projection and range reads."""

    def moved(read) -> int:
        before = store.io_stats().bytes_read
        read()
        return store.io_stats().bytes_read - before

    started = time.perf_counter()
    full_bytes = moved(lambda: store.get(keys))
    get_s = time.perf_counter() - started
    row = moved(lambda: store.get(keys[:1]))
    field = moved(lambda: store.get(keys[:1], [LOGPROBS]))
    start = TOKENS // 3  # deliberately not chunk-aligned
    ranged = moved(lambda: store.get_range(keys[0], LOGPROBS, start, start + TOKENS // 4))
    return {
        "get_mb_s": full_bytes / get_s / 1e6,
        "get_rows_s": len(keys) / get_s,
        "row_bytes": row,
        "projection_ratio": field / row,
        "range_ratio": ranged / row,
        "range_over_field": ranged / field,
    }


def _round(store: Any, rows: list[dict[str, np.ndarray]], reader: Callable | None) -> dict[str, float]:
    """One timed round: write every row, read them back (``reader``: from another actor), delete."""
    keys = [f"bench/{uuid.uuid4().hex[:8]}/{i}" for i in range(len(rows))]
    started = time.perf_counter()
    for key, row in zip(keys, rows):
        store.put(key, row)
    put_s = time.perf_counter() - started
    written = sum(a.nbytes for row in rows for a in row.values())
    reads = measure_reads(store, keys) if reader is None else reader(store, keys)
    store.delete(keys)
    return {"put_mb_s": written / put_s / 1e6, "put_rows_s": len(rows) / put_s, **reads}


def _figures(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """Throughputs as spreads over the rounds; the byte ratios (the same every round) from the last."""
    timed = ("put_mb_s", "put_rows_s", "get_mb_s", "get_rows_s")
    return {**{k: v for k, v in rounds[-1].items() if k not in timed}, **{k: spread([r[k] for r in rounds]) for k in timed}}


def run(size: str) -> dict[str, Any]:
    import ray

    from vlrl.store import LocalStore
    from vlrl.store.ray_store import RayStore
    from vlrl.store.transferqueue_store import TransferQueueStore

    rows = [make_row(seed) for seed in range(ROWS[size])]
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address="local", num_cpus=4, include_dashboard=False, object_store_memory=3 * 1024**3, log_to_driver=False)

    @ray.remote(num_cpus=0)
    class Reader:
        def measure(self, store: Any, keys: list[str]) -> dict[str, float]:
            return measure_reads(store, keys)

    actor = Reader.remote()

    def remote_reader(store: Any, keys: list[str]) -> dict[str, float]:
        return ray.get(actor.measure.remote(store, keys))

    tag = uuid.uuid4().hex[:8]
    backends = {
        "local": (LocalStore.Config().build(), None),
        "ray": (RayStore.Config(namespace=f"bench-{tag}").build(), remote_reader),
        "transferqueue": (TransferQueueStore.Config(partition=f"bench-{tag}").build(), remote_reader),
    }
    try:
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in backends}
        names = list(backends)
        for rep in range(REPS[size] + 1):  # round 0 warms up every backend and is not reported
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                store, reader = backends[name]
                rounds[name].append(_round(store, rows, reader))
        results = {name: _figures(measured[1:]) for name, measured in rounds.items()}
    finally:
        for name, (store, _) in backends.items():
            if name != "local":
                store.destroy()
        if started_ray:
            ray.shutdown()
    return {
        "row": {"tokens": TOKENS, "screenshots": SCREENSHOTS, "resolution": f"{WIDTH}x{HEIGHT}", "rows": len(rows), "rounds": REPS[size]},
        "backends": results,
        "projection_ratio": max(r["projection_ratio"] for r in results.values()),
        "range_ratio": max(r["range_ratio"] for r in results.values()),
    }
