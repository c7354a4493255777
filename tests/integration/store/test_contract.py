"""The PayloadStore contract (tests/unit/store/test_contract.py) on the stores behind Ray actors:
the Ray store and TransferQueue, each on the session's Ray; and what only a distributed store
promises: a payload is readable from any actor and outlives the actor that wrote it."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from tests.unit.store.test_contract import (  # noqa: F401  (the contract's tests, collected here on these stores)
    test_put_get_round_trip,
    test_every_supported_dtype_round_trips,
    test_torch_tensors_are_accepted,
    test_get_reads_only_the_named_fields,
    test_get_several_keys_keeps_their_order,
    test_get_range_matches_slice_and_moves_only_overlapping_chunks,
    test_add_fields_later,
    test_second_put_of_a_key_is_an_error,
    test_second_write_of_a_field_is_an_error,
    test_add_fields_to_a_missing_key_is_an_error,
    test_missing_key_is_named,
    test_unknown_field_is_named_with_the_fields_that_exist,
    test_out_of_range_reads_are_refused,
    test_bad_values_are_refused_and_nothing_is_written,
    test_bad_keys_and_field_lists_are_refused,
    test_delete_frees_keys_and_bytes,
    test_a_deleted_key_can_be_written_anew,
    test_schema_reads_no_payload,
    test_a_shared_key_lives_until_its_last_holder_releases_it,
    test_a_shared_key_other_writers_put_and_release_between_share_and_write_is_shared,
    test_a_reference_listed_twice_in_one_release_drops_two,
    test_releasing_more_than_a_holder_holds_is_refused_and_changes_nothing,
    test_a_release_that_is_not_key_holder_pairs_is_refused,
    test_concurrent_holders_of_one_key_end_it_exactly_once,
    test_a_reference_to_a_key_being_written_is_held_and_released,
    test_a_failed_write_keeps_the_references_taken_meanwhile,
    test_a_failed_write_alone_leaves_nothing,
    test_put_shared_of_a_key_being_written_waits_for_that_write,
    test_a_write_whose_key_went_while_it_ran_lands_nowhere,
    test_a_writer_that_died_mid_write_is_taken_back_and_its_key_written_afresh,
)
from tests.unit.store.test_contract import CHUNK
from vlrl.store import PayloadStore


KEYS = [f"k{i}" for i in range(4)] + ["k", "seq"] + [f"shared-{r}" for r in range(20)]
"""Every key the contract's tests write."""


@pytest.fixture(scope="module")
def built(ray_session):
    """One store per backend for the module (each build starts index-shard actors, seconds apiece
    here); ``store`` hands it out emptied."""
    stores: dict[str, PayloadStore] = {}
    yield stores
    for one in stores.values():
        one.destroy()


def _build(backend: str) -> PayloadStore:
    name = uuid.uuid4().hex[:8]
    if backend == "ray":
        from vlrl.store.ray_store import RayStore

        return RayStore.Config(namespace=name, chunk_rows=CHUNK).build()
    from vlrl.store.transferqueue_store import TransferQueueStore

    return TransferQueueStore.Config(partition=name, chunk_rows=CHUNK).build()


@pytest.fixture(params=["ray", "transferqueue"])
def store(request, built) -> PayloadStore:
    backend = request.param
    if backend not in built:
        built[backend] = _build(backend)
    yield built[backend]
    built[backend].delete(KEYS, missing_ok=True)
    if built[backend].stats().keys:  # a key this list misses: the next test gets a fresh store
        built.pop(backend).destroy()


def test_reader_actor_sees_writer_actor_payload_after_writer_exits(ray_session, store):
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

    read_before = store.io_stats().bytes_read
    writer = Writer.remote()
    assert ray.get(writer.write.remote(store, "seq", 23)) == 23 * 8
    ray.kill(writer)  # the writer process is gone; its payload must not be
    reader = Reader.remote()
    tokens, logprobs, window, moved = ray.get(reader.read.remote(store, "seq"))
    np.testing.assert_array_equal(tokens, np.arange(23, dtype=np.int32))
    np.testing.assert_array_equal(logprobs, np.full(23, -0.5, np.float32))
    np.testing.assert_array_equal(window, np.arange(5, 11, dtype=np.int32))
    # The full row, then chunks [4,8) and [8,12) of token_ids only (CHUNK rows a chunk).
    assert CHUNK == 4 and moved == 23 * 8 + 2 * 4 * 4
    # The driver never read the payload; its own client moved nothing.
    assert store.io_stats().bytes_read == read_before
    ray.kill(reader)
