"""TP-group packer benchmark: bytes each TP group fetches, and memory its shared window takes.

Workload: multi-turn GUI trajectories of 4k-32k tokens (lognormal, median ~8k) with the four
per-token fields every trained sequence has (token ids, logprobs, loss mask, advantages: 13 bytes
a token), in a ``RayStore`` of ``CHUNK_ROWS``-token chunks, planned into 64k-token micro-batches
for DP=2 x CP x TP=2, CP in {2, 4}. Every TP group's window goes through the real packer path
(``TPGroupPacker.publish``: ranges from metadata, ``get_range`` per range and field, written once
into a shared segment), and then each of its TP ranks maps it.

Figures per CP size (summed over every TP group and micro-batch):
- ``cp_fetch_ratio``: bytes the packer fetched / bytes a CP-unaware packer fetches (every row of
  the micro-batch, whole, then cut). Ideal 1/CP; chunk rounding adds up to ``CHUNK_ROWS`` tokens
  at each of a window's <= 4 cuts inside a row. Target <= 1.1/CP.
- ``touched_row_ratio``: the same bytes / fetching whole only the rows the window touches.
- ``tp_copy_ratio``: node memory the shared windows hold (tmpfs blocks the segments allocated,
  whatever the number of ranks mapping them) / one private copy of the window per TP rank.
  Ideal 1/TP; target <= 1.1/TP.
- ``pack_ms``: time to cut and publish one window, ``spread`` over every window.

``tp_copy_pss`` measures the TP copy with real processes instead (``vlrl.bench.tp_copy_pss``): the
costliest micro-batch's window at CP=1 (the largest a TP group holds), published once, held by TP
child processes mapping the segment vs each holding a private copy; per TP size, the children's
summed PSS, shared over private (ideal 1/TP).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import numpy as np

from vlrl.bench import tp_copy_pss
from vlrl.bench.spread import spread
from vlrl.pack import Layout, MicroBatchPlanner, TPGroupPacker, shared
from vlrl.records import ADVANTAGES, LOGPROBS, LOSS_MASK, TOKEN_IDS, SeqMeta, fields_for
from vlrl.store import PayloadStore

CHUNK_ROWS = 256
"""Store chunk (tokens): small enough that rounding the window's cuts out to chunks costs a few
percent of a 64k-token micro-batch's window at CP=4, large enough to keep objects per row few."""
MICRO_BATCH_TOKENS = 65536
PACKED = fields_for({"policy_gradient"})
ROWS = {"smoke": 16, "small": 32, "full": 256}


def draw_lengths(n: int, seed: int) -> np.ndarray:
    """``(n,)`` trajectory lengths: lognormal around 8k tokens, clipped to 4k..32k."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(8192), 0.6, n), 4096, 32768).astype(np.int64)


def write_rows(store: PayloadStore, lengths: np.ndarray, seed: int) -> list[SeqMeta]:
    rng = np.random.default_rng(seed)
    tag = uuid.uuid4().hex[:8]
    metas = []
    for i, n in enumerate(lengths.tolist()):
        key = f"bench-packer/{tag}/{i}"
        mask = rng.random(n) > 0.3
        store.put(
            key,
            {
                TOKEN_IDS: rng.integers(0, 151_000, n).astype(np.int32),
                LOGPROBS: -rng.exponential(1.0, n).astype(np.float32),
                LOSS_MASK: mask,
                ADVANTAGES: np.where(mask, rng.normal(), 0).astype(np.float32),
            },
        )
        metas.append(
            SeqMeta(
                key=key,
                group_id=f"{tag}/{i // 8}",
                source="bench",
                sample_index=i % 8,
                reward=0.0,
                success=False,
                finish="done",
                turns=1,
                num_tokens=n,
                num_response_tokens=int(mask.sum()),
                context_lengths=(n,),
                policy_version=0,
            )
        )
    return metas


def measure_layout(store: PayloadStore, metas: list[SeqMeta], layout: Layout) -> dict[str, float]:
    """Fetch and memory figures of every TP group's windows under ``layout``."""
    plan = MicroBatchPlanner.Config(max_tokens_per_micro_batch=MICRO_BATCH_TOKENS).build().plan(metas, layout.dp)
    config = TPGroupPacker.Config()

    def moved(read) -> tuple[int, Any]:
        before = store.io_stats().bytes_read
        value = read()
        return store.io_stats().bytes_read - before, value

    window_bytes = whole_bytes = touched_bytes = shared_bytes = private_bytes = windows = 0
    pack_ms = []
    for leader in range(0, layout.world_size, layout.tp):
        packer = config.build(
            store=store, layout=layout, plan=plan, metas=metas, group_ranks=layout.tp_group(leader), fields=PACKED
        )
        for i, mb in enumerate(plan.ranks[packer.dp_rank]):
            started = time.perf_counter()
            fetched, published = moved(lambda: packer.publish(i))
            pack_ms.append((time.perf_counter() - started) * 1e3)
            views = [published.attach() for _ in range(layout.tp)]  # every TP rank maps the one copy
            shared_bytes += os.stat(published.segment.path).st_blocks * 512
            private_bytes += layout.tp * sum(a.nbytes for a in views[0].arrays().values())
            shared.unlink(published.segment)
            del views
            touched = sorted({r.key for r in mb.cp_ranges(packer.cp_rank, layout)})
            window_bytes += fetched
            whole_bytes += moved(lambda: store.get(list(mb.keys), PACKED))[0]
            touched_bytes += moved(lambda: store.get(touched, PACKED))[0] if touched else 0
            windows += 1
    return {
        "micro_batches_per_dp_rank": plan.num_micro_batches,
        "cp_fetch_ratio": window_bytes / whole_bytes,
        "cp_fetch_target": 1.1 / layout.cp,
        "touched_row_ratio": window_bytes / touched_bytes,
        "tp_copy_ratio": shared_bytes / private_bytes,
        "tp_copy_target": 1.1 / layout.tp,
        "window_mb": window_bytes / windows / 1e6,
        "pack_ms": spread(pack_ms),
    }


def measure_tp_pss(
    store: PayloadStore, metas: list[SeqMeta], *, dp: int, tps: tuple[int, ...], rounds: int
) -> dict[str, Any]:
    """``tp_copy_pss.measure`` of DP rank 0's costliest window at CP=1, published by the real packer,
    for each TP size in ``tps``."""
    plan = MicroBatchPlanner.Config(max_tokens_per_micro_batch=MICRO_BATCH_TOKENS).build().plan(metas, dp)
    out = {}
    for tp in tps:
        layout = Layout(dp, 1, tp)
        packer = TPGroupPacker.Config().build(
            store=store, layout=layout, plan=plan, metas=metas, group_ranks=layout.tp_group(0), fields=PACKED
        )
        published = packer.publish(0)  # micro-batches are costliest first
        try:
            out[f"tp{tp}"] = tp_copy_pss.measure(published, tp, rounds)
        finally:
            shared.unlink(published.segment)
    return out


def measure(
    store: PayloadStore,
    n_rows: int,
    *,
    cps: tuple[int, ...] = (2, 4),
    dp: int = 2,
    tp: int = 2,
    pss_tps: tuple[int, ...] = (2, 4),
    pss_rounds: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    """Write ``n_rows`` trajectories to ``store``, measure each CP size and the TP copy's PSS at each
    of ``pss_tps``, and delete them."""
    lengths = draw_lengths(n_rows, seed)
    metas = write_rows(store, lengths, seed)
    try:
        chunk_rows = store.schema(metas[0].key)[TOKEN_IDS].chunk_rows
        per_cp = {f"cp{cp}": measure_layout(store, metas, Layout(dp, cp, tp)) for cp in cps}
        tp_pss = measure_tp_pss(store, metas, dp=dp, tps=pss_tps, rounds=pss_rounds)
    finally:
        store.delete([m.key for m in metas])
    meets = all(
        r["cp_fetch_ratio"] <= r["cp_fetch_target"] and r["tp_copy_ratio"] <= r["tp_copy_target"]
        for r in per_cp.values()
    )
    figures = {"rows": n_rows, "tokens": int(lengths.sum()), "micro_batch_tokens": MICRO_BATCH_TOKENS}
    figures.update(chunk_rows=chunk_rows, dp=dp, tp=tp, **per_cp, tp_copy_pss=tp_pss, meets_targets=meets)
    return _rounded(figures)


def run(size: str) -> dict[str, Any]:
    """The packer half of ``vlrl bench pack``: ``small`` packs 32 trajectories, ``full`` 256."""
    import ray

    from vlrl.store.ray_store import RayStore

    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=1024**3, log_to_driver=False)
    store = RayStore.Config(namespace=f"bench-packer-{uuid.uuid4().hex[:8]}", chunk_rows=CHUNK_ROWS).build()
    try:
        return measure(store, ROWS[size])
    finally:
        store.destroy()
        if started_ray:
            ray.shutdown()


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(value, 6) if isinstance(value, float) else value
