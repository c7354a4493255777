"""An env host never leases a harness instance whose call crashed: it is closed at release and
the next lease gets a fresh one; an action the harness refuses leaves the instance in play."""

from __future__ import annotations

import itertools

import pytest

from tests.helpers.light_harness import LightHarness
from vlrl.harness import Action, ActionError
from vlrl.pool import HostConfig
from vlrl.pool.env_host import EnvHost


class FailsOnce(LightHarness):
    """Its ``fails`` call raises on the first instance only; counts constructions and closes."""

    made = itertools.count()
    built: list[FailsOnce] = []
    closed: list[FailsOnce] = []

    def __init__(self, *, fails: str) -> None:
        super().__init__(step_s=0)
        self.fails = fails
        self.number = next(self.made)
        self.built.append(self)

    def reset(self, *, seed=None, options=None):
        self._maybe_fail("reset")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self._maybe_fail("step")
        return super().step(action)

    def oracle(self):
        self._maybe_fail("oracle")
        return super().oracle()

    def close(self):
        self.closed.append(self)

    def _maybe_fail(self, call: str) -> None:
        if call == self.fails and self.number == 0:
            raise RuntimeError(f"{call} crashed")


@pytest.fixture()
def fresh_counts():
    FailsOnce.made, FailsOnce.built, FailsOnce.closed = itertools.count(), [], []


@pytest.mark.parametrize("call", ["reset", "step", "oracle"])
def test_an_instance_whose_call_crashed_is_closed_and_replaced(fresh_counts, call):
    host = EnvHost(0, FailsOnce, HostConfig(max_tenants=4, threads=2))
    settings = {"fails": call}

    def reset(i):
        host.reset(i, 0, None)

    def step(i):
        host.step(i, Action.click(1, 1))

    def oracle(i):
        host.oracle(i)

    calls = {"reset": [reset], "step": [reset, step], "oracle": [reset, oracle]}[call]

    host.open("first/0", settings)
    with pytest.raises(RuntimeError, match=f"{call} crashed"):
        for play in calls:
            play("first/0")
    host.release("first/0")
    host.open("second/0", settings)
    host.reset("second/0", 0, None)
    host.step("second/0", Action.click(1, 1))  # the fresh instance plays
    closed, instances = list(FailsOnce.closed), host.instances()
    host.shutdown()
    assert [h.number for h in FailsOnce.built] == [0, 1]  # the second lease built a new instance
    assert closed == [FailsOnce.built[0]] and instances == 1  # the broken one was closed at release


def test_a_refused_action_keeps_the_instance_warm(fresh_counts):
    host = EnvHost(0, FailsOnce, HostConfig(max_tenants=4, threads=2))
    settings = {"fails": "none"}

    host.reset("first/0", 0, None, open_settings=settings)  # opened by its first reset
    with pytest.raises(ActionError, match="outside"):
        host.step("first/0", Action.click(500, 500))  # off the 64x48 screen
    host.release("first/0")
    host.open("second/0", settings)
    host.shutdown()
    assert len(FailsOnce.built) == 1 and FailsOnce.closed == [FailsOnce.built[0]]  # closed at shutdown only
