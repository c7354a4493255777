"""The store under concurrent writers (tests/unit/store/test_concurrent_writers.py) on the Ray and
TransferQueue stores, on the session's Ray: no faults, and failed, slow writes with take-backs
and dead writers. A Ray round trip costs milliseconds of CPU (a TransferQueue write or read tens),
so CI runs a few groups a case (about 10 CPU s each); ``python -m
tests.unit.store.concurrent_writers --backend ray`` runs thousands (docs/store.md)."""

from __future__ import annotations

import pytest

from tests.integration.store.test_contract import _build
from tests.unit.store.concurrent_writers import SETTINGS, Stress
from tests.unit.store.test_concurrent_writers import check

CASES = [
    ("ray", "clean", 64),
    ("ray", "3% failed writes, 1 ms delay", 64),
    ("transferqueue", "3% failed writes, 1 ms delay", 24),
]
"""(backend, setting, trajectories)."""


@pytest.fixture(scope="module")
def stores(ray_session):
    built: dict = {}
    yield built
    for store in built.values():
        store.destroy()


@pytest.mark.parametrize(("backend", "setting", "trajectories"), CASES)
def test_concurrent_writers_leave_nothing_and_fail_nobody(stores, backend, setting, trajectories):
    if backend not in stores:
        stores[backend] = _build(backend)
    figures = Stress(stores[backend], backend, SETTINGS[setting], seed=1).run(trajectories)
    check(figures)
