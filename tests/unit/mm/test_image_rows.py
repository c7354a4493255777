"""Screenshots stored as tiles: exact pixels back, only changed tiles written, and every tile pack
living exactly as long as the last image naming it, whatever the order images go in (on the
in-process store; tests/integration/mm/test_image_rows.py runs these tests on a Ray store)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from vlrl.bench.tiles_bench import desktop_screens
from vlrl.mm import describe_image
from vlrl.mm.image_rows import ImageWriter, pack_key, read_images
from vlrl.mm.tiles import TileCodec, tile_hash
from vlrl.store import LocalStore


def _typing_screens(turns: int = 12) -> list[np.ndarray]:
    return desktop_screens(640, 480, turns)


@pytest.fixture()
def store():
    """The in-process store; the same tests on a Ray store are tests/integration/mm/test_image_rows.py."""
    return LocalStore()


def _write(store, shots, prefix: str, writer: str | None = None):
    images = ImageWriter(store)
    metas = [describe_image(s) for s in shots]
    written = []
    for i, (meta, shot) in enumerate(zip(metas, shots)):
        before = store.io_stats().bytes_written
        images.put(store, meta, shot, holder=f"{prefix}/{i}", writer=writer)
        written.append(store.io_stats().bytes_written - before)
    return metas, written


def test_screens_come_back_exact_and_later_turns_write_only_what_changed(store):
    shots = _typing_screens()
    metas, written = _write(store, shots, "seq/a")
    back = read_images(store, [m.store_key for m in metas])
    for meta, shot in zip(metas, shots):
        assert back[meta.store_key].tobytes() == shot.tobytes()
    png_free_raw = sum(s.nbytes for s in shots)
    assert store.stats().bytes < png_free_raw / 50  # flat GUI pixels, each distinct tile once
    assert max(written[2:]) < written[0] / 5  # a typed character changes a few tiles; a whole screen again is ~1x


def test_a_pack_lives_while_any_image_naming_it_does(store):
    shots = _typing_screens()
    metas, _ = _write(store, shots, "seq/a")
    first_pack = pack_key(list(dict.fromkeys(tile_hash(t) for t in TileCodec().split(shots[0]))))
    order = list(range(len(metas)))
    random.Random(0).shuffle(order)
    for step, i in enumerate(order):
        store.release([(metas[i].store_key, f"seq/a/{i}")])
        alive = [metas[j].store_key for j in order[step + 1 :]]
        if alive:  # every later screen names the first screen's pack for the tiles that never changed
            assert store.contains([first_pack]) == [True]
            back = read_images(store, alive)
            for j in order[step + 1 :]:
                assert back[metas[j].store_key].tobytes() == shots[j].tobytes()
    assert store.stats().keys == 0  # the last image took every pack with it


def test_an_image_two_trajectories_share_is_stored_once_and_outlives_either(store):
    shots = _typing_screens(turns=4)
    first, _ = _write(store, shots, "seq/a")
    keys = store.stats().keys
    second, written = _write(store, [shots[0], shots[0]], "seq/b")  # the same opening screen
    assert written == [0, 0] and store.stats().keys == keys
    store.release([(m.store_key, f"seq/a/{i}") for i, m in enumerate(first)])
    assert read_images(store, [second[0].store_key])[second[0].store_key].tobytes() == shots[0].tobytes()
    store.release([(second[0].store_key, "seq/b/0"), (second[0].store_key, "seq/b/1")])
    assert store.stats().keys == 0


def test_writers_that_knew_different_tiles_store_one_image_in_packs_of_their_own(store):
    # A's first screen introduced all its tiles; once that image went, its pack lived on in A's
    # later screen. B had written another screen first, so the same first screen introduces
    # fewer tiles for B, in other slots: B's pack must not be taken for A's.
    shots = _typing_screens(turns=3)
    other = shots[0].copy()  # the first screen's left half, and noise
    other[:, 320:] = np.random.default_rng(0).integers(0, 256, other[:, 320:].shape, dtype=np.uint8)
    a, _ = _write(store, shots[:2], "seq/a")
    store.release([(a[0].store_key, "seq/a/0")])
    b, _ = _write(store, [other, shots[0]], "seq/b")
    back = read_images(store, [b[1].store_key, a[1].store_key])
    assert back[b[1].store_key].tobytes() == shots[0].tobytes()
    assert back[a[1].store_key].tobytes() == shots[1].tobytes()
    store.release([(a[1].store_key, "seq/a/1"), *((m.store_key, f"seq/b/{i}") for i, m in enumerate(b))])
    assert store.stats().keys == 0


def test_a_writer_that_loses_an_image_to_another_does_not_name_the_pack_it_dropped(store, monkeypatch):
    # Two trajectories of a group reach the same second screen. B writes it (all tiles in B's pack)
    # while A is between finding it absent and writing it; A's pack of the changed tiles goes with
    # A's references, so A's third screen must not name it.
    shots = _typing_screens(turns=3)
    metas = [describe_image(s) for s in shots]
    a, b = ImageWriter(store), ImageWriter(store)
    a.put(store, metas[0], shots[0], holder="seq/a/0")
    real = store.put_shared

    def racing(key, fields, **kwargs):
        if key == metas[1].store_key:
            monkeypatch.setattr(store, "put_shared", real)
            b.put(store, metas[1], shots[1], holder="seq/b/1")
        return real(key, fields, **kwargs)

    monkeypatch.setattr(store, "put_shared", racing)
    assert a.put(store, metas[1], shots[1], holder="seq/a/1") is False  # shared B's
    assert a.put(store, metas[2], shots[2], holder="seq/a/2") is True
    back = read_images(store, [m.store_key for m in metas])
    assert all(back[m.store_key].tobytes() == shot.tobytes() for m, shot in zip(metas, shots))
    store.release([(metas[i].store_key, f"seq/a/{i}") for i in range(3)] + [(metas[1].store_key, "seq/b/1")])
    assert store.stats().keys == 0


def test_a_dead_writers_tiled_images_are_taken_back_whole(store):
    shots = _typing_screens(turns=5)
    _write(store, shots, "seq/dead", writer="run-1")
    assert store.stats().keys > len(shots)  # images and their packs
    store.take_back(["run-1"])
    assert store.stats().keys == 0


def test_a_dead_writers_image_that_another_writer_shares_keeps_its_packs(store):
    # run-1 wrote three screens, each later one naming the earlier packs; run-2 took the third
    # screen too. Taking run-1 back must leave that image whole, its packs included.
    shots = _typing_screens(turns=3)
    dead, _ = _write(store, shots, "seq/dead", writer="run-1")
    alive, written = _write(store, [shots[2]], "seq/alive", writer="run-2")
    assert written == [0]  # shared, not written again
    store.take_back(["run-1"])
    assert store.contains([m.store_key for m in dead[:2]]) == [False, False]
    key = alive[0].store_key
    assert read_images(store, [key])[key].tobytes() == shots[2].tobytes()
    store.release([(key, "seq/alive/0")])
    assert store.stats().keys == 0


def _gate_packs(store, monkeypatch, *, fail: bool):
    """Holds the first tile-pack write until ``open`` is set (``fail``: then it fails), and sets
    ``taken`` once another writer has taken its reference to that pack while it was held."""
    import threading

    entered, opened, taken = threading.Event(), threading.Event(), threading.Event()
    real_write, real_index = store._write_fields, store._index
    held: list[str] = []

    def write(key, arrays, specs, *handle):
        if not key.startswith("tiles/") or held:
            return real_write(key, arrays, specs, *handle)
        held.append(key)
        entered.set()
        assert opened.wait(30), "the gate was never opened"
        handles = real_write(key, arrays, specs, *handle)
        if fail:
            raise OSError(f"injected: the byte write of {key!r} failed")
        return handles

    def index(method, *args, **kwargs):
        out = real_index(method, *args, **kwargs)
        if method in ("take", "share") and held and not opened.is_set() and held[0] in args[0]:
            taken.set()
        return out

    monkeypatch.setattr(store, "_write_fields", write)
    monkeypatch.setattr(store, "_index", index)
    return entered, opened, taken


@pytest.mark.parametrize("fails", [False, True], ids=["pack-commits", "pack-fails"])
def test_a_screen_written_while_another_writer_writes_its_pack_waits_for_that_pack(store, monkeypatch, fails):
    # Issue 51, case 1 (and, failing, case 3 of 2ccf2b9's review): B is mid-write of the pack of a
    # group's first screen when A writes the same screen. A waits for B's pack rather than name a
    # pack not written (a false ShardLostError before), and writes it again if B's write fails, so
    # A's image is readable whatever B's write does; when both let go, nothing is left.
    from concurrent.futures import ThreadPoolExecutor

    shot = _typing_screens(turns=1)[0]
    meta = describe_image(shot)
    entered, opened, taken = _gate_packs(store, monkeypatch, fail=fails)
    with ThreadPoolExecutor(2) as pool:
        b = pool.submit(ImageWriter(store).put, store, meta, shot, holder="seq/b/0")
        assert entered.wait(30)
        a = pool.submit(ImageWriter(store).put, store, meta, shot, holder="seq/a/0")
        assert taken.wait(30)  # A holds a reference to the pack B is writing
        with pytest.raises(TimeoutError):
            a.result(0.5)  # and waits for it
        opened.set()
        a_wrote = a.result(30)
        if fails:
            with pytest.raises(OSError, match="injected"):
                b.result(30)
        else:
            assert b.result(30) in (True, False) and a_wrote != b.result(30)  # one wrote it, one shared
    assert read_images(store, [meta.store_key])[meta.store_key].tobytes() == shot.tobytes()
    store.release([(meta.store_key, "seq/a/0")] + ([] if fails else [(meta.store_key, "seq/b/0")]))
    assert store.stats().keys == 0
