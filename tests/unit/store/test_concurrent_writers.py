"""The store under concurrent writers (issue 51) on the in-process store: GRPO-like groups written
as rollouts write them, every setting of ``concurrent_writers.SETTINGS`` (no faults; take-backs;
failed writes; failed and slow writes), leave no record behind, raise no ShardLostError (no shard
dies here) and serve every live image. tests/integration/store/test_concurrent_writers.py runs it
on the Ray and TransferQueue stores; ``python -m tests.unit.store.concurrent_writers`` runs it
long (docs/store.md)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from tests.unit.store.concurrent_writers import SETTINGS, TILE, Stress
from vlrl.store import LocalStore

TRAJECTORIES = 752
"""Per setting: 3,008 trajectories in all (94 groups of 8 each)."""


def check(figures) -> None:
    """The three figures of issue 51 at zero, and every outcome explained by its setting."""
    summary = asdict(figures)
    assert figures.keys_left == 0 and figures.bytes_left == 0, summary
    assert figures.false_shard_lost == 0, summary
    assert figures.unreadable_live_images == 0, summary
    assert figures.unexplained == 0, summary
    assert figures.transferqueue_keys_left in (None, 0), summary
    outcomes = figures.finished + figures.failed_injected + figures.taken_back + figures.died
    assert outcomes == figures.trajectories, summary  # every trajectory counted once


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_concurrent_writers_leave_nothing_and_fail_nobody(setting):
    figures = Stress(LocalStore(image_tile_px=TILE), "local", SETTINGS[setting]).run(TRAJECTORIES)
    check(figures)
    if SETTINGS[setting].fail:
        assert figures.failed_injected > 0  # the faults did happen
    if SETTINGS[setting].died:
        assert figures.died > 0 and figures.taken_back > 0
