"""The PayloadStore contract (tests/unit/store/test_contract.py) on the stores behind Ray actors:
the Ray store and TransferQueue, each on the session's Ray."""

from __future__ import annotations

import uuid

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
    test_a_reference_listed_twice_in_one_release_drops_two,
    test_releasing_more_than_a_holder_holds_is_refused_and_changes_nothing,
    test_a_release_that_is_not_key_holder_pairs_is_refused,
    test_concurrent_holders_of_one_key_end_it_exactly_once,
)
from tests.unit.store.test_contract import CHUNK
from vlrl.store import PayloadStore


KEYS = [f"k{i}" for i in range(4)] + ["k"] + [f"shared-{r}" for r in range(20)]
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
