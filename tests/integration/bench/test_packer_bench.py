"""The packer benchmark: a TP group fetches ~1/CP of its micro-batch, and its TP ranks' processes
pay for one window copy between them."""

from __future__ import annotations

import uuid

from vlrl.bench.packer_bench import CHUNK_ROWS, draw_lengths, measure, measure_tp_pss, write_rows
from vlrl.store import LocalStore


def _measure(chunk_rows: int, n_rows: int) -> dict:
    from vlrl.store.ray_store import RayStore

    store = RayStore.Config(namespace=f"packer-bench-{uuid.uuid4().hex[:8]}", chunk_rows=chunk_rows).build()
    try:
        return measure(store, n_rows, pss_tps=())  # the TP copy is the next test's, without Ray
    finally:
        store.destroy()


def test_cp_window_fetch_meets_its_target(ray_session):
    result = _measure(CHUNK_ROWS, 24)
    print(f"\npacker bench (24 rows, chunk {CHUNK_ROWS}): {result}")
    assert result["chunk_rows"] == CHUNK_ROWS and result["tp"] == 2
    for cp in (2, 4):
        figures = result[f"cp{cp}"]
        assert 1 / cp <= figures["cp_fetch_ratio"] <= 1.1 / cp, cp
        assert figures["touched_row_ratio"] < 1, cp  # cutting within rows beats fetching them whole
    assert result["meets_targets"]


def test_tp_rank_processes_pay_for_one_shared_window_between_them():
    """Real child processes map the packer's published segment, or each copy it: summed PSS."""
    store = LocalStore.Config().build()
    metas = write_rows(store, draw_lengths(16, seed=0), seed=0)
    result = measure_tp_pss(store, metas, dp=2, tps=(2, 4), rounds=1)
    print(f"\nTP copy PSS: {result}")
    for tp in (2, 4):
        figures = result[f"tp{tp}"]
        window_mb = figures["window_mb"]
        # Each child read every page of the window: together they map all of it (at least) ...
        assert figures["shared_pss_mb"]["median"] >= 0.95 * window_mb, tp
        # ... and each private child pays a whole copy: the baseline does not hide it.
        assert figures["private_pss_mb"]["median"] >= 0.95 * tp * window_mb, tp
    # If the sharing broke, every child would pay the whole copy and the ratio would be ~1.
    assert result["tp2"]["pss_ratio"] < 0.75
    assert result["tp4"]["pss_ratio"] < result["tp2"]["pss_ratio"]


def test_whole_row_chunks_miss_the_fetch_target(ray_session):
    """The chunk size is what makes the target hold: a row-sized chunk moves whole rows again."""
    result = _measure(32768, 12)
    assert result["cp4"]["cp_fetch_ratio"] > 1.1 / 4
    assert not result["meets_targets"]
