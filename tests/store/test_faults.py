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


def test_two_runs_on_one_cluster_get_separate_stores(ray_session):
    first, second = RayStore.Config().build(), RayStore.Config().build()
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


def test_a_dead_shard_fails_reads_fast_naming_the_shard_and_the_loss(ray_session):
    store = RayStore.Config(shards=2, call_timeout_s=5.0).build()
    keys = [f"seq/{i}" for i in range(8)]
    for key in keys:
        store.put(key, ROW)
    victim = keys[0]
    ray.kill(store._shards._shards[store._shards.position(victim)])
    time.sleep(0.5)
    start = time.monotonic()
    with pytest.raises(ShardLostError, match=r"store shard 'ray-store/.*' died: payload lost"):
        store.get([victim])
    with pytest.raises(ShardLostError, match="payload lost"):
        store.schema(victim)
    assert time.monotonic() - start < 5.0
    store.destroy()


def test_a_ledger_takes_back_its_writes_and_a_late_write_takes_itself_back():
    store = LocalStore()
    store.put_shared("img", ROW)  # another holder's reference
    ledger = WriteLedger("tenant t")
    ledger.put_shared(store, "img", ROW)
    ledger.put(store, "seq/t", ROW)
    ledger.take_back()
    assert store.contains(["seq/t", "img"]) == [False, True]  # only the ledger's reference went
    with pytest.raises(WritesTakenBackError, match="tenant t"):
        ledger.put(store, "seq/late", ROW)
    assert store.stats().keys == 1


def test_a_write_that_completes_after_take_back_is_undone_by_its_writer():
    ledger = WriteLedger("tenant t")

    class TakenBackMidWrite(LocalStore):
        def put(self, key, fields):
            super().put(key, fields)
            ledger.take_back()  # the host gives up while this write is in flight

    store = TakenBackMidWrite()
    with pytest.raises(WritesTakenBackError):
        ledger.put(store, "seq/t", ROW)
    assert store.stats().keys == 0
