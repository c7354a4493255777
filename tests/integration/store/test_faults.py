"""Store faults: runs sharing a cluster stay apart, a dead shard fails fast and by name, and a
ledger takes back exactly the writes made through it."""

from __future__ import annotations

import time

import numpy as np
import pytest
import ray

from vlrl.store import LocalStore, ShardLostError, WriteLedger, WritesTakenBackError
from vlrl.store.ray_store import RayStore

ROW = {"token_ids": np.arange(6, dtype=np.int32)}


@pytest.mark.parametrize("backend", ["ray", "transferqueue"])
def test_two_runs_on_one_cluster_get_separate_stores(ray_session, backend):
    from vlrl.store.transferqueue_store import TransferQueueStore

    config = RayStore.Config if backend == "ray" else TransferQueueStore.Config
    first, second = config().build(), config().build()
    first.put("seq/a", ROW)
    second.put("seq/a", ROW)  # the same key in another run's store is no duplicate
    first.destroy()
    assert second.get(["seq/a"])["seq/a"]["token_ids"].tolist() == list(range(6))
    second.destroy()


def test_a_config_resolved_once_builds_the_same_store_again(ray_session):
    config = RayStore.Config()
    store = config.build()
    assert config.namespace is not None
    store.put("seq/b", ROW)
    assert config.build().contains(["seq/b"]) == [True]  # what a trainer worker builds from it
    store.destroy()


def test_a_dead_shard_fails_reads_naming_the_shard_and_the_loss(ray_session):
    # A dead shard is answered by its death (ShardLostError), never by waiting out the call
    # timeout (that would be StoreTimeoutError): checked by the error's type, not by a clock.
    store = RayStore.Config(shards=2).build()
    keys = [f"seq/{i}" for i in range(8)]
    for key in keys:
        store.put(key, ROW)
    victim = keys[0]
    shard = store._shards._shards[store._shards.position(victim)]
    ray.kill(shard)
    wait_until_dead(shard)
    with pytest.raises(ShardLostError, match=r"store shard 'ray-store/.*' died: payload lost"):
        store.get([victim])
    with pytest.raises(ShardLostError, match="payload lost"):
        store.schema(victim)
    store.destroy()


def wait_until_dead(actor) -> None:
    """``ray.kill`` is asynchronous: poll until the actor's death is seen (bounded, not timed)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers after 60 s")


def restart_shards(store: RayStore, positions: list[int]) -> None:
    """Kill shards as a crash would (Ray restarts each, empty) and wait until each answers as its
    successor (``ray.kill`` is asynchronous: the old shard may still answer for a moment)."""
    for position in positions:
        ray.kill(store._shards._shards[position], no_restart=False)
    deadline = time.monotonic() + 180  # a restart is a process start: tens of seconds on a loaded machine
    for position in positions:
        shard = store._shards._shards[position]
        while True:
            try:
                if ray.get(shard.call.remote("__getattribute__", ("successor",), {}), timeout=5) == (True, True):
                    break
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass  # dead, or restarting
            assert time.monotonic() < deadline, "the shard did not come back"
            time.sleep(0.2)


def test_a_restarted_shard_serves_new_writes_and_reports_what_it_lost(ray_session):
    store = RayStore.Config(shards=2).build()  # default call timeout: a fresh shard is slow under load
    keys = [f"seq/{i}" for i in range(8)]
    position = store._shards.position(keys[0])
    lost = [k for k in keys if store._shards.position(k) == position]
    kept = [k for k in keys if k not in lost]
    for key in keys:
        store.put(key, ROW)
    image = next(f"img/{i}" for i in range(64) if store._shards.position(f"img/{i}") == position)
    store.put_shared(image, ROW, holder=lost[0])  # held by a sequence written before the crash
    restart_shards(store, [position])

    with pytest.raises(ShardLostError, match=r"store shard 'ray-store/.*/%d'.*restarted" % position):
        store.get([lost[0]])
    with pytest.raises(ShardLostError, match="restarted"):
        store.delete(keys)  # refused before any shard deletes
    assert store.contains(kept) == [True] * len(kept)
    store.put(lost[0], ROW)  # the key's shard takes writes again
    assert store.get([lost[0]])[lost[0]]["token_ids"].tolist() == list(range(6))

    store.put_shared(image, ROW, holder="seq/new")  # written again after the crash, by a new holder
    assert store.release([(image, lost[0])]) == []  # the old holder's reference died with the shard
    assert store.contains([image]) == [True]  # so the new holder's pixels stay
    assert store.release([(image, "seq/new")]) == [image]
    store.delete(keys, missing_ok=True)
    assert store.stats().keys == 0
    store.destroy()


def test_a_ledger_takes_back_its_writes_and_a_late_write_takes_itself_back():
    store = LocalStore()
    store.put_shared("img", ROW, holder="seq/other")  # another holder's reference
    ledger = WriteLedger("tenant t")
    ledger.put_shared(store, "img", ROW, holder="seq/t")
    ledger.put(store, "seq/t", ROW)
    ledger.take_back()
    assert store.contains(["seq/t", "img"]) == [False, True]  # only the ledger's reference went
    with pytest.raises(WritesTakenBackError, match="tenant t"):
        ledger.put(store, "seq/late", ROW)
    assert store.stats().keys == 1


def test_a_write_that_completes_after_take_back_is_undone_by_its_writer():
    ledger = WriteLedger("tenant t")

    class TakenBackMidWrite(LocalStore):
        def put(self, key, fields, **names):
            super().put(key, fields, **names)
            ledger.take_back()  # the host gives up while this write is in flight

    store = TakenBackMidWrite()
    with pytest.raises(WritesTakenBackError):
        ledger.put(store, "seq/t", ROW)
    assert store.stats().keys == 0


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_take_back_undoes_exactly_what_a_dead_writer_wrote(backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    store = LocalStore() if backend == "local" else RayStore.Config(shards=2).build()
    store.put_shared("img/shared", ROW, holder="seq/other", writer="run-b")  # another run's reference
    for run in ("run-a", "run-b"):
        ledger = WriteLedger(f"tenant {run}", writer=run)
        ledger.put_shared(store, "img/shared", ROW, holder=f"seq/{run}")
        ledger.put_shared(store, f"img/{run}", ROW, holder=f"seq/{run}")
        ledger.put(store, f"seq/{run}", ROW)
    store.release([("img/shared", "seq/other")])  # a reference dropped normally leaves no record behind

    assert sorted(store.take_back(["run-a"])) == ["img/run-a", "seq/run-a"]  # its process died; undone from here
    assert store.contains(["img/shared", "img/run-b", "seq/run-b"]) == [True] * 3
    assert store.holds([("img/shared", "seq/run-a"), ("img/shared", "seq/run-b")]) == [False, True]
    assert store.take_back(["run-a"]) == []  # nothing twice
    assert sorted(store.take_back(["run-b"])) == ["img/run-b", "img/shared", "seq/run-b"]
    assert store.stats().keys == 0
