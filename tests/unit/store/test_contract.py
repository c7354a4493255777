"""The PayloadStore contract: every backend passes every test here. This module runs it on the
in-process store; tests/integration/store/test_contract.py imports its tests and runs them on the
stores behind Ray actors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from vlrl.store import (
    DuplicateWriteError,
    FieldMissingError,
    KeyMissingError,
    LocalStore,
    PayloadStore,
    PayloadTypeError,
    RangeError,
    StoreError,
)

CHUNK = 4
"""Tiny chunks so that 10-30 row test fields span several of them."""


def _row(n: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "token_ids": rng.integers(0, 50_000, n).astype(np.int32),
        "logprobs": rng.standard_normal(n).astype(np.float32),
        "loss_mask": rng.random(n) > 0.5,
        "routing": rng.integers(0, 8, (n, 2, 3)).astype(np.int16),
    }


@pytest.fixture()
def store() -> PayloadStore:
    """The in-process store. tests/integration/store/test_contract.py runs the same tests on the Ray
    and TransferQueue stores."""
    return LocalStore.Config().build()


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def test_put_get_round_trip(store):
    row = _row()
    store.put("k0", row)
    got = store.get(["k0"])["k0"]
    assert sorted(got) == sorted(row)
    for name in row:
        _same(got[name], row[name])


@pytest.mark.parametrize(
    "dtype", ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
)
def test_every_supported_dtype_round_trips(store, dtype):
    value = (np.arange(11 * 3).reshape(11, 3) % 7).astype(dtype)
    store.put("k0", {"x": value})
    _same(store.get(["k0"], ["x"])["k0"]["x"], value)
    _same(store.get_range("k0", "x", 3, 9), value[3:9])


def test_torch_tensors_are_accepted(store):
    store.put("k0", {"x": torch.arange(9, dtype=torch.int64)})
    _same(store.get(["k0"])["k0"]["x"], np.arange(9, dtype=np.int64))


def test_get_reads_only_the_named_fields(store):
    row = _row(n=30)
    store.put("k0", row)
    before = store.io_stats().bytes_read
    got = store.get(["k0"], fields=["logprobs"])
    assert list(got["k0"]) == ["logprobs"]
    _same(got["k0"]["logprobs"], row["logprobs"])
    assert store.io_stats().bytes_read - before == row["logprobs"].nbytes


def test_get_several_keys_keeps_their_order(store):
    rows = [_row(n=5 + i, seed=i) for i in range(3)]
    for i, row in enumerate(rows):
        store.put(f"k{i}", row)
    got = store.get(["k2", "k0", "k1"], fields=["token_ids"])
    assert list(got) == ["k2", "k0", "k1"]
    for i in range(3):
        _same(got[f"k{i}"]["token_ids"], rows[i]["token_ids"])


@pytest.mark.parametrize(("start", "stop"), [(0, 1), (3, 9), (4, 8), (0, 30), (29, 30), (7, 23)])
def test_get_range_matches_slice_and_moves_only_overlapping_chunks(store, start, stop):
    row = _row(n=30)
    store.put("k0", row)
    before = store.io_stats().bytes_read
    got = store.get_range("k0", "routing", start, stop)
    _same(got, row["routing"][start:stop])
    moved = store.io_stats().bytes_read - before
    row_bytes = row["routing"][0].nbytes
    assert (stop - start) * row_bytes <= moved <= (stop - start + 2 * (CHUNK - 1)) * row_bytes


def test_add_fields_later(store):
    store.put("k0", _row())
    advantages = np.linspace(-1, 1, 10, dtype=np.float32)
    store.add_fields("k0", {"advantages": advantages})
    _same(store.get(["k0"], ["advantages"])["k0"]["advantages"], advantages)
    assert "advantages" in store.schema("k0")


def test_second_put_of_a_key_is_an_error(store):
    store.put("k0", _row())
    with pytest.raises(DuplicateWriteError, match="'k0' was already written"):
        store.put("k0", {"other": np.zeros(3)})


def test_second_write_of_a_field_is_an_error(store):
    store.put("k0", _row())
    with pytest.raises(DuplicateWriteError, match=r"already has field\(s\) \['logprobs'\]"):
        store.add_fields("k0", {"logprobs": np.zeros(10, np.float32)})


def test_add_fields_to_a_missing_key_is_an_error(store):
    with pytest.raises(KeyMissingError, match="'nope' does not exist"):
        store.add_fields("nope", {"advantages": np.zeros(3)})


def test_missing_key_is_named(store):
    with pytest.raises(KeyMissingError, match="'missing-key' does not exist"):
        store.get(["missing-key"])
    with pytest.raises(KeyMissingError, match="'missing-key'"):
        store.get_range("missing-key", "token_ids", 0, 1)


def test_unknown_field_is_named_with_the_fields_that_exist(store):
    store.put("k0", _row())
    with pytest.raises(FieldMissingError, match=r"no field\(s\) \['values'\]; it has \['logprobs', 'loss_mask'"):
        store.get(["k0"], ["values"])
    with pytest.raises(FieldMissingError, match="values"):
        store.get_range("k0", "values", 0, 1)


@pytest.mark.parametrize(("start", "stop"), [(-1, 3), (5, 5), (6, 2), (0, 11), (10, 12)])
def test_out_of_range_reads_are_refused(store, start, stop):
    store.put("k0", _row())
    with pytest.raises(RangeError, match=rf"'k0'/'logprobs'\[{start}:{stop}\]: expected 0 <= start < stop <= 10"):
        store.get_range("k0", "logprobs", start, stop)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.array(["a", "b"]), "dtype <U1 is not supported"),
        (np.array([1 + 2j]), "dtype complex128 is not supported"),
        (np.array([object()]), "dtype object is not supported"),
        (np.float32(1.0), "got float32; expected a numpy array"),
        (np.zeros(()), r"shape \(\); expected an array with at least one row"),
        (np.zeros((0, 3)), r"shape \(0, 3\); expected an array with at least one row"),
        ([1, 2, 3], "got list; expected a numpy array or a CPU torch tensor"),
        (torch.zeros(3, dtype=torch.bfloat16), "bfloat16 is not supported"),
    ],
)
def test_bad_values_are_refused_and_nothing_is_written(store, value, message):
    with pytest.raises(PayloadTypeError, match=message):
        store.put("k0", {"good": np.zeros(2), "bad": value})
    assert store.contains(["k0"]) == [False]
    store.put("k0", {"good": np.zeros(2)})  # the failed put reserved nothing


def test_bad_keys_and_field_lists_are_refused(store):
    with pytest.raises(StoreError, match="must be a list of strings"):
        store.get("k0")
    with pytest.raises(StoreError, match="non-empty strings"):
        store.put("", {"x": np.zeros(1)})
    with pytest.raises(PayloadTypeError, match="non-empty mapping"):
        store.put("k0", {})
    store.put("k0", {"x": np.zeros(1)})
    with pytest.raises(StoreError, match="non-empty list of field names"):
        store.get(["k0"], fields="x")


def test_delete_frees_keys_and_bytes(store):
    store.put("k0", _row())
    store.put("k1", _row())
    stats = store.stats()
    assert stats.keys == 2 and stats.bytes == 2 * sum(a.nbytes for a in _row().values())
    store.delete(["k0"])
    assert store.contains(["k0", "k1"]) == [False, True]
    assert store.stats().keys == 1
    with pytest.raises(KeyMissingError, match="'k0'"):
        store.get(["k0"])
    with pytest.raises(KeyMissingError, match=r"cannot delete store key\(s\) \['k0'\]"):
        store.delete(["k0"])
    store.delete(["k0", "k1"], missing_ok=True)
    assert store.stats().keys == 0 and store.stats().bytes == 0


def test_a_deleted_key_can_be_written_anew(store):
    store.put("k0", {"x": np.zeros(3)})
    store.delete(["k0"])
    store.put("k0", {"x": np.ones(3)})
    _same(store.get(["k0"])["k0"]["x"], np.ones(3))


def test_schema_reads_no_payload(store):
    row = _row()
    store.put("k0", row)
    before = store.io_stats().bytes_read
    schema = store.schema("k0")
    assert schema["routing"].shape == (10, 2, 3) and schema["routing"].dtype == "int16"
    assert store.io_stats().bytes_read == before


def test_local_store_refuses_to_cross_processes():
    with pytest.raises(StoreError, match="cannot be sent to another"):
        pickle.dumps(LocalStore())


def test_a_shared_key_lives_until_its_last_holder_releases_it(store):
    first, again = _row(6, seed=1), _row(6, seed=2)
    assert store.put_shared("k0", first, holder="a") is True
    assert store.put_shared("k0", again, holder="b") is False  # a reference, not a write: the first bytes stay
    written = store.io_stats().bytes_written
    assert store.put_shared("k0", again, holder="c") is False and store.io_stats().bytes_written == written
    assert store.release([("k0", "b")]) == [] and store.release([("k0", "a")]) == []
    _same(store.get(["k0"])["k0"]["token_ids"], first["token_ids"])
    assert store.release([("k0", "c")]) == ["k0"]
    assert store.contains(["k0"]) == [False] and store.stats().keys == 0


def test_a_shared_key_other_writers_put_and_release_between_share_and_write_is_shared(store, monkeypatch):
    # A group's trajectories put one tile pack at once: each time this writer finds "k" absent,
    # another writer puts it before this one's write and lets it go right after. Deciding "write
    # or share" in two calls failed here whatever the retries; the write itself now shares.
    real = store._store_fields
    others = iter(f"other-{i}" for i in range(10))

    def racing(key, *args, **kwargs):
        if key != "k" or store._store_fields is not racing:
            return real(key, *args, **kwargs)
        other = next(others)
        monkeypatch.setattr(store, "_store_fields", real)
        store.put_shared(key, _row(4, seed=9), holder=other)
        monkeypatch.setattr(store, "_store_fields", racing)
        try:
            return real(key, *args, **kwargs)
        finally:
            store.release([(key, other)])

    monkeypatch.setattr(store, "_store_fields", racing)
    assert store.put_shared("k", _row(4), holder="mine") is False  # a reference to the other's write
    _same(store.get(["k"])["k"]["token_ids"], _row(4, seed=9)["token_ids"])
    assert store.release([("k", "mine")]) == ["k"] and store.stats().keys == 0


def test_a_reference_listed_twice_in_one_release_drops_two(store):
    store.put_shared("k1", _row(4), holder="s")
    store.put_shared("k1", _row(4), holder="s")  # one sequence naming the image twice
    store.put("k2", _row(4))  # a put key is held by itself
    assert sorted(store.release([("k1", "s"), ("k2", "k2"), ("k1", "s")])) == ["k1", "k2"]
    assert store.stats().keys == 0


def test_releasing_more_than_a_holder_holds_is_refused_and_changes_nothing(store):
    store.put_shared("k3", _row(4), holder="a")
    store.put_shared("k3", _row(4), holder="b")
    with pytest.raises(KeyMissingError, match="k3"):
        store.release([("k3", "a"), ("k3", "a")])
    with pytest.raises(KeyMissingError, match="'c'"):  # another holder's reference cannot be dropped for it
        store.release([("k3", "c")])
    assert store.contains(["k3"]) == [True]
    with pytest.raises(KeyMissingError, match="never"):
        store.release([("never", "a")])
    assert store.release([("k3", "a")]) == [] and store.release([("k3", "b")]) == ["k3"]


def test_a_release_that_is_not_key_holder_pairs_is_refused(store):
    with pytest.raises(StoreError, match=r"\(key, holder\) pairs"):
        store.release(["k"])


def test_concurrent_holders_of_one_key_end_it_exactly_once(store):
    """Threads writing and releasing one key at random interleavings: it is deleted exactly when
    the last reference goes, never while one is held."""
    import random
    import threading
    import time

    rounds, holders = 20, 4
    freed: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(holders)

    def holder(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for r in range(rounds):
                barrier.wait()
                store.put_shared(f"shared-{r}", _row(3, seed=r), holder=f"holder-{seed}")
                barrier.wait()  # every holder holds it now
                assert store.contains([f"shared-{r}"]) == [True]
                time.sleep(rng.random() * 0.005)  # release in a random order
                freed.extend(store.release([(f"shared-{r}", f"holder-{seed}")]))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=holder, args=(i,)) for i in range(holders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(freed) == sorted(f"shared-{r}" for r in range(rounds))  # each freed once, by its last holder
    assert store.stats().keys == 0


# -- keys under concurrent writers (docs/store.md): a reference in any state, a token per write ------------


class Gate:
    """Holds the byte write of store key ``key`` (its first one) until ``open()``; ``fail``: the
    bytes land, then the write raises, as a storage unit that fails after receiving them would.
    On the stores whose client writes the bytes (local, TransferQueue); the Ray store's shard
    writes them itself (its writes are gated in the concurrent-writers stress instead)."""

    def __init__(self, store, monkeypatch, key: str, *, fail: bool = False) -> None:
        import threading

        if "_write_fields" not in vars(type(store)):
            pytest.skip(f"{type(store).__name__} writes a key's bytes in its index shard, out of a test's reach")
        self.entered, self._opened, self._passed = threading.Event(), threading.Event(), False
        real = store._write_fields

        def gated(k, arrays, specs, *handle):
            if not k.startswith(key) or self._passed:
                return real(k, arrays, specs, *handle)
            self._passed = True
            self.entered.set()
            assert self._opened.wait(30), "the gate was never opened"
            handles = real(k, arrays, specs, *handle)
            if fail:
                raise OSError(f"injected: the byte write of {k!r} failed")
            return handles

        monkeypatch.setattr(store, "_write_fields", gated)

    def open(self) -> None:
        self._opened.set()


def _in_thread(call):
    """``call()`` on a thread of its own; its future."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def test_a_reference_to_a_key_being_written_is_held_and_released(store, monkeypatch):
    # Issue 51, case 2: A takes a reference to "k" while B writes it and drops it before B commits.
    gate = Gate(store, monkeypatch, "k")
    b = _in_thread(lambda: store.put_shared("k", _row(4), holder="B"))
    assert gate.entered.wait(30)
    assert store.share(["k"], "A") == [True] and store.holds([("k", "A")]) == [True]
    assert store.contains(["k"]) == [False] and store.stats().keys == 1  # counted while unwritten
    assert store.release([("k", "A")]) == []  # B still holds it
    gate.open()
    assert b.result(30) is True
    _same(store.get(["k"])["k"]["logprobs"], _row(4)["logprobs"])
    assert store.release([("k", "B")]) == ["k"] and store.stats().keys == 0


def test_a_failed_write_keeps_the_references_taken_meanwhile(store, monkeypatch):
    # Issue 51, case 3: B's write fails after A took a reference: A's reference stays (the key is
    # failed, counted by stats), a read says the write failed, A's release ends it; the next
    # put_shared writes the key anew for whoever holds it.
    gate = Gate(store, monkeypatch, "k", fail=True)
    b = _in_thread(lambda: store.put_shared("k", _row(4), holder="B"))
    assert gate.entered.wait(30)
    assert store.share(["k"], "A") == [True]
    gate.open()
    with pytest.raises(OSError, match="injected"):
        b.result(30)
    assert store.holds([("k", "A"), ("k", "B")]) == [True, False]
    assert store.contains(["k"]) == [False] and store.stats().keys == 1 and store.stats().written == 0
    with pytest.raises(KeyMissingError, match="its write failed"):
        store.get(["k"])
    assert store.share(["k"], "C") == [False]  # nothing to share
    assert store.put_shared("k", _row(4, seed=2), holder="C") is True  # written anew, A's reference kept
    _same(store.get(["k"])["k"]["logprobs"], _row(4, seed=2)["logprobs"])
    assert store.release([("k", "A")]) == [] and store.release([("k", "C")]) == ["k"]
    assert store.stats().keys == 0


def test_a_failed_write_alone_leaves_nothing(store, monkeypatch):
    for key in ("k", "seq"):
        Gate(store, monkeypatch, key, fail=True).open()
    with pytest.raises(OSError, match="injected"):
        store.put_shared("k", _row(4), holder="B", writer="run-B")
    with pytest.raises(OSError, match="injected"):
        store.put("seq", _row(4), writer="run-B")
    assert store.stats().keys == 0 and store.stats().bytes == 0
    assert store.take_back(["run-B"]) == []  # nothing of it was left to take back


@pytest.mark.parametrize("fails", [False, True], ids=["commits", "fails"])
def test_put_shared_of_a_key_being_written_waits_for_that_write(store, monkeypatch, fails):
    # A second writer of a key in flight returns only once it is written: by the first writer
    # (shared, False), or by itself when the first write fails (True). Never on an unwritten key.
    gate = Gate(store, monkeypatch, "k", fail=fails)
    b = _in_thread(lambda: store.put_shared("k", _row(4), holder="B"))
    assert gate.entered.wait(30)
    c = _in_thread(lambda: store.put_shared("k", _row(4, seed=3), holder="C"))
    with pytest.raises(TimeoutError):
        c.result(0.2)  # waits while B writes
    gate.open()
    assert c.result(30) is fails
    if fails:
        with pytest.raises(OSError, match="injected"):
            b.result(30)
    else:
        assert b.result(30) is True
    _same(store.get(["k"])["k"]["logprobs"], _row(4, seed=3 if fails else 0)["logprobs"])
    assert store.release([("k", "C")] + ([] if fails else [("k", "B")])) == ["k"]
    assert store.stats().keys == 0


def test_a_write_whose_key_went_while_it_ran_lands_nowhere(store, monkeypatch):
    # "k" is deleted mid-write: the record goes at once (nothing waits for the commit), the write
    # is counted until its writer ends it; its late commit lands nowhere and its bytes are freed.
    gate = Gate(store, monkeypatch, "k")
    b = _in_thread(lambda: store.put("k", _row(4)))
    assert gate.entered.wait(30)
    store.delete(["k"], missing_ok=True)
    assert store.stats().keys == 1  # the orphaned write
    store.put("k", _row(4, seed=5))  # the key written afresh meanwhile
    gate.open()
    with pytest.raises(KeyMissingError, match="went while it was written"):
        b.result(30)
    _same(store.get(["k"])["k"]["logprobs"], _row(4, seed=5)["logprobs"])  # the late write landed nowhere
    store.delete(["k"])
    assert store.stats().keys == 0 and store.stats().bytes == 0


def test_a_writer_that_died_mid_write_is_taken_back_and_its_key_written_afresh(store, monkeypatch):
    # run-B dies while writing "k" (its thread is held, as a dead process's would never end): take_back
    # returns at once, fails the write (A's reference stays on the failed key) and frees its bytes;
    # the next put_shared writes "k" anew; the dead write's late commit lands nowhere.
    gate = Gate(store, monkeypatch, "k")
    b = _in_thread(lambda: store.put_shared("k", _row(4), holder="B", writer="run-B"))
    assert gate.entered.wait(30)
    assert store.share(["k"], "A") == [True]
    store.take_back(["run-B"])
    assert store.holds([("k", "A"), ("k", "B")]) == [True, False] and store.contains(["k"]) == [False]
    assert store.put_shared("k", _row(4, seed=6), holder="C") is True
    gate.open()
    with pytest.raises(KeyMissingError, match="went while it was written"):
        b.result(30)
    _same(store.get(["k"])["k"]["logprobs"], _row(4, seed=6)["logprobs"])
    assert store.release([("k", "A"), ("k", "C")]) == ["k"]
    assert store.stats().keys == 0 and store.stats().bytes == 0
