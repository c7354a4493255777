"""Why a host has not answered, from Ray's actor table entry (real Ray: tests/integration/pool/test_host_startup.py)."""

from __future__ import annotations

import pytest

from vlrl.pool.host_startup import describe_actor


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"State": "PENDING_CREATION", "Pid": 0}, "free resources"),
        ({"State": "PENDING_CREATION", "Pid": 4242}, "pid 4242) is up and has not finished its constructor"),
        ({"State": "ALIVE", "Pid": 4242}, "alive (pid 4242) but has not answered"),
        ({"State": "DEPENDENCIES_UNREADY"}, "arguments"),
        ({"State": "DEAD", "DeathCause": "the worker died: out of memory"}, "dead: the worker died: out of memory"),
        ({"State": "RESTARTING", "DeathCause": ""}, "restarting: no cause recorded"),
        (None, "never registered"),
    ],
)
def test_each_ray_state_gives_its_reason(entry, words):
    assert words in describe_actor(entry)
