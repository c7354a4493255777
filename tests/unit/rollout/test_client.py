"""The inference client against in-process endpoints that behave like replicas (unit tests of
the caller; the real engine is exercised in tests/integration/rollout/test_agent_loop.py)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import numpy as np
import pytest

from vlrl.mm import content_hash
from vlrl.rollout.client import (
    ContextImage,
    EndpointUnavailable,
    InferenceClient,
    InferenceError,
    TransientEndpointError,
)
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, SamplingParams


class Replica:
    """Holds images by hash in a tiny LRU, counts the pixel bytes it receives."""

    def __init__(self, name: str, capacity: int = 100, load: int = 0) -> None:
        self.name = name
        self.capacity = capacity
        self.held: OrderedDict[str, None] = OrderedDict()
        self.bytes_received = 0
        self.received: list[str] = []
        self.requests: list[GenerateRequest] = []
        self.reported_load = load
        self.dead = False
        self.flaky = 0
        self.forgotten: list[str] = []

    async def generate(self, request: GenerateRequest):
        if self.dead:
            raise EndpointUnavailable("replica died")
        if self.flaky:
            self.flaky -= 1
            raise TransientEndpointError("overloaded")
        self.requests.append(request)
        missing = tuple(p.content_hash for p in request.images if p.pixels is None and p.content_hash not in self.held)
        for part in request.images:
            if part.pixels is not None:
                self.bytes_received += part.pixels.nbytes
                self.received.append(part.content_hash)
                self.held[part.content_hash] = None
                self.held.move_to_end(part.content_hash)
                while len(self.held) > self.capacity:
                    self.held.popitem(last=False)
        if missing:  # what this request carried is kept; only references can miss
            return CacheMiss(request.request_id, missing)
        return GenerateResult(request.request_id, np.array([7], np.int32), np.array([-0.1], np.float32), "stop", 0, 1, 0)

    async def load(self) -> int:
        if self.dead:
            raise EndpointUnavailable("replica died")
        return self.reported_load

    async def forget(self, trajectory_id: str) -> None:
        self.forgotten.append(trajectory_id)


def _screens(n: int, size=(72, 128)) -> list[ContextImage]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        out.append(ContextImage(content_hash(pixels), pixels))
    return out


def _served(replicas: list[Replica], trajectory: str) -> list[str]:
    """The replicas that received requests of ``trajectory``, by name."""
    return [r.name for r in replicas if any(q.trajectory_id == trajectory for q in r.requests)]


async def _rollout(client: InferenceClient, trajectory: str, screens: list[ContextImage]) -> None:
    for turn in range(1, len(screens) + 1):
        await client.generate(trajectory, np.zeros(3, np.int32), screens[:turn], SamplingParams(), request_id=f"{trajectory}-{turn}")


def test_each_image_crosses_to_the_replica_exactly_once_per_trajectory():
    replica = Replica("r0")
    client = InferenceClient([replica])
    screens = _screens(10)
    asyncio.run(_rollout(client, "t", screens))
    assert sorted(replica.received) == sorted(s.content_hash for s in screens)
    assert replica.bytes_received == sum(s.pixels.nbytes for s in screens)
    assert client.stats.image_bytes_sent == replica.bytes_received
    assert client.stats.images_referenced == sum(range(10))  # turn k references its k-1 older images


def test_a_repeated_screenshot_is_shipped_once_even_within_one_request():
    replica = Replica("r0")
    client = InferenceClient([replica])
    (screen,) = _screens(1)
    asyncio.run(_rollout(client, "t", [screen, screen, screen]))
    assert replica.received == [screen.content_hash]


def test_eviction_is_answered_by_resending_not_by_failing():
    replica = Replica("r0", capacity=2)
    client = InferenceClient([replica])
    screens = _screens(6)
    asyncio.run(_rollout(client, "t", screens))
    assert client.stats.cache_misses > 0
    assert len(replica.requests) > 6  # misses were resent
    assert replica.requests[-1].images[-1].content_hash == screens[-1].content_hash


def test_new_trajectories_go_to_the_least_loaded_replica_and_stick():
    busy, idle = Replica("busy", load=9), Replica("idle", load=1)
    client = InferenceClient([busy, idle])
    asyncio.run(_rollout(client, "t1", _screens(2)))
    assert _served([busy, idle], "t1") == ["idle"]
    idle.reported_load = 50  # later turns stay where the caches are
    asyncio.run(_rollout(client, "t1", _screens(3)))
    assert _served([busy, idle], "t1") == ["idle"] and not busy.requests
    asyncio.run(_rollout(client, "t2", _screens(1)))
    assert _served([busy, idle], "t2") == ["busy"]


def test_a_dead_replica_is_left_and_the_trajectory_resent_in_full_elsewhere():
    r0, r1 = Replica("r0"), Replica("r1", load=5)
    client = InferenceClient([r0, r1], InferenceClient.Config(backoff_s=0))
    screens = _screens(4)
    asyncio.run(_rollout(client, "t", screens[:2]))
    r0.dead = True
    r0.requests.clear()
    asyncio.run(_rollout(client, "t", screens))
    assert _served([r0, r1], "t") == ["r1"]
    assert sorted(set(r1.received)) == sorted(s.content_hash for s in screens)
    assert client.stats.reroutes == 1


def test_transient_errors_are_retried_then_reported_clearly():
    replica = Replica("r0")
    replica.flaky = 2
    client = InferenceClient([replica], InferenceClient.Config(backoff_s=0, retries=3))
    asyncio.run(_rollout(client, "t", _screens(1)))
    assert client.stats.retries == 2
    replica.flaky = 10
    with pytest.raises(InferenceError, match=r"failed after 2 tries: r0: TransientEndpointError: overloaded"):
        asyncio.run(
            InferenceClient([replica], InferenceClient.Config(backoff_s=0, retries=1)).generate(
                "t", np.zeros(1, np.int32), [], SamplingParams(), request_id="x"
            )
        )


def test_end_trajectory_lets_the_replica_free_its_prefix_and_ends_the_stickiness():
    replica, other = Replica("r0"), Replica("r1", load=5)
    client = InferenceClient([replica, other])
    asyncio.run(_rollout(client, "t", _screens(1)))
    asyncio.run(client.end_trajectory("t"))
    assert replica.forgotten == ["t"]
    replica.reported_load = 50  # a trajectory id used again is placed afresh, by load
    asyncio.run(_rollout(client, "t", _screens(1)))
    assert _served([other], "t") == ["r1"]


def test_a_branch_goes_to_its_roots_replica_and_ships_only_what_is_new_after_the_fork():
    root_replica, idle = Replica("r0"), Replica("r1")
    client = InferenceClient([root_replica, idle])
    screens = _screens(4)
    asyncio.run(_rollout(client, "root", screens[:3]))  # the root's prefix: three screens, all shipped once
    root_replica.reported_load = 50  # a fresh trajectory would go to the idle replica now
    sent = root_replica.bytes_received
    client.fork_trajectory("root", "branch")
    asyncio.run(
        client.generate("branch", np.zeros(3, np.int32), screens, SamplingParams(), request_id="branch-1")
    )  # the prefix's three screens and a new one
    assert _served([root_replica, idle], "branch") == ["r0"]
    assert root_replica.received[-1] == screens[3].content_hash and len(root_replica.received) == 4
    assert root_replica.bytes_received - sent == screens[3].pixels.nbytes  # the prefix went by reference
    assert [q.fork_of for q in root_replica.requests if q.trajectory_id == "branch"] == ["root"]
    with pytest.raises(ValueError, match="fork_trajectory: trajectory 'branch' has made requests already"):
        client.fork_trajectory("root", "branch")
    unforked = InferenceClient([Replica("r2")])  # without the fork, the branch ships its prefix again
    asyncio.run(unforked.generate("b", np.zeros(3, np.int32), screens, SamplingParams(), request_id="b-1"))
    assert unforked._endpoints[0].bytes_received == sum(s.pixels.nbytes for s in screens)
