"""The packer benchmark: a TP group fetches ~1/CP of its micro-batch and holds one window copy."""

from __future__ import annotations

import uuid

import pytest

from vlrl.bench.packer_bench import CHUNK_ROWS, draw_lengths, measure

pytestmark = pytest.mark.ray


def _measure(chunk_rows: int, n_rows: int) -> dict:
    from vlrl.store.ray_store import RayStore

    store = RayStore.Config(namespace=f"packer-bench-{uuid.uuid4().hex[:8]}", chunk_rows=chunk_rows).build()
    try:
        return measure(store, n_rows)
    finally:
        store.destroy()


def test_lengths_are_long_gui_trajectories():
    lengths = draw_lengths(4096, seed=0)
    assert lengths.min() >= 4096 and lengths.max() <= 32768
    assert (lengths >= 16384).mean() > 0.05


def test_cp_window_fetch_and_shared_copy_meet_their_targets(ray_session):
    result = _measure(CHUNK_ROWS, 24)
    print(f"\npacker bench (24 rows, chunk {CHUNK_ROWS}): {result}")
    assert result["chunk_rows"] == CHUNK_ROWS and result["tp"] == 2
    for cp in (2, 4):
        figures = result[f"cp{cp}"]
        assert 1 / cp <= figures["cp_fetch_ratio"] <= 1.1 / cp, cp
        assert figures["touched_row_ratio"] < 1, cp  # cutting within rows beats fetching them whole
        assert 1 / 2 <= figures["tp_copy_ratio"] <= 1.1 / 2, cp
    assert result["meets_targets"]


def test_whole_row_chunks_miss_the_fetch_target(ray_session):
    """The chunk size is what makes the target hold: a row-sized chunk moves whole rows again."""
    result = _measure(32768, 12)
    assert result["cp4"]["cp_fetch_ratio"] > 1.1 / 4
    assert not result["meets_targets"]
