"""Distributed backends: payloads are readable from any actor and outlive the actor that wrote them."""

from __future__ import annotations

import uuid

import numpy as np
import pytest


def _build(kind: str):
    name = uuid.uuid4().hex[:8]
    if kind == "ray":
        from vlrl.store.ray_store import RayStore

        return RayStore.Config(namespace=name, chunk_rows=4).build()
    from vlrl.store.transferqueue_store import TransferQueueStore

    return TransferQueueStore.Config(partition=name, chunk_rows=4).build()


@pytest.mark.parametrize("kind", ["ray", "transferqueue"])
def test_reader_actor_sees_writer_actor_payload_after_writer_exits(ray_session, kind):
    ray = ray_session

    @ray.remote(num_cpus=0)
    class Writer:
        def write(self, store, key, n):
            store.put(key, {"token_ids": np.arange(n, dtype=np.int32), "logprobs": np.full(n, -0.5, np.float32)})
            return store.io_stats().bytes_written

    @ray.remote(num_cpus=0)
    class Reader:
        def read(self, store, key):
            full = store.get([key])[key]
            window = store.get_range(key, "token_ids", 5, 11)
            return full["token_ids"], full["logprobs"], window, store.io_stats().bytes_read

    store = _build(kind)
    writer = Writer.remote()
    assert ray.get(writer.write.remote(store, "seq", 23)) == 23 * 8
    ray.kill(writer)  # the writer process is gone; its payload must not be
    reader = Reader.remote()
    tokens, logprobs, window, moved = ray.get(reader.read.remote(store, "seq"))
    np.testing.assert_array_equal(tokens, np.arange(23, dtype=np.int32))
    np.testing.assert_array_equal(logprobs, np.full(23, -0.5, np.float32))
    np.testing.assert_array_equal(window, np.arange(5, 11, dtype=np.int32))
    assert moved == 23 * 8 + 2 * 4 * 4  # the full row, then chunks [4,8) and [8,12) of token_ids only
    # The driver never read the payload; its own client moved nothing.
    assert store.io_stats().bytes_read == 0
    store.delete(["seq"])
    ray.kill(reader)

