"""Screenshots stored as tiles on a Ray store: the in-process store's tests
(tests/unit/mm/test_image_rows.py) run again here on shards behind actors, and the packs of images a
restarted shard lost go with them."""

from __future__ import annotations

import pytest
import ray

from tests.unit.mm.test_image_rows import (  # noqa: F401  (the shared tests, collected here on a Ray store)
    test_screens_come_back_exact_and_later_turns_write_only_what_changed,
    test_a_pack_lives_while_any_image_naming_it_does,
    test_an_image_two_trajectories_share_is_stored_once_and_outlives_either,
    test_writers_that_knew_different_tiles_store_one_image_in_packs_of_their_own,
    test_a_writer_that_loses_an_image_to_another_does_not_name_the_pack_it_dropped,
    test_a_dead_writers_tiled_images_are_taken_back_whole,
    test_a_dead_writers_image_that_another_writer_shares_keeps_its_packs,
)
from tests.unit.mm.test_image_rows import _typing_screens, _write
from vlrl.mm import describe_image
from vlrl.mm.image_rows import ImageWriter
from vlrl.store import ShardLostError


@pytest.fixture()
def store(ray_session):
    from vlrl.store.ray_store import RayStore

    built = RayStore.Config().build()
    yield built
    built.destroy()


def _two_shard_ray_store():
    from vlrl.store.ray_store import RayStore

    return RayStore.Config(shards=2).build()  # default call timeout: a fresh shard is slow under load


def test_the_packs_of_images_a_restarted_shard_lost_go_with_them(ray_session):
    from tests.integration.store.test_faults import restart_shards

    store = _two_shard_ray_store()
    shots = _typing_screens(turns=8)
    metas, _ = _write(store, shots, "seq/a")
    lost = store._shards.position(metas[0].store_key)
    on_lost = {m.store_key for m in metas if store._shards.position(m.store_key) == lost}
    survivor = store._shards._shards[1 - lost]
    held_for = ray.get(survivor.call.remote("__getattribute__", ("_held_for",), {}))[1]
    assert {owner for owner in held_for.values()} & on_lost, "needs a surviving pack held by a lost image"
    restart_shards(store, [lost])
    # Every image goes: those the restarted shard lost release as a no-op, the others for real.
    store.release([(m.store_key, f"seq/a/{i}") for i, m in enumerate(metas)])
    assert store.stats().keys == 0  # the surviving packs that only lost images held went too
    store.destroy()


class _RestartsBeforeImage:
    """A real store whose ``image``'s index shard restarts just before that image is written:
    after its writer took the references to its packs, before it wrote the image."""

    def __init__(self, store, image: str) -> None:
        self._store, self._image = store, image

    def __getattr__(self, name):
        return getattr(self._store, name)

    def put_shared(self, key, fields, **names):
        if key == self._image:
            from tests.integration.store.test_faults import restart_shards

            restart_shards(self._store, [self._store._shards.position(key)])
        return self._store.put_shared(key, fields, **names)


def test_an_image_whose_shard_restarts_while_it_is_written_fails_and_leaves_nothing(ray_session):
    store = _two_shard_ray_store()
    shots = _typing_screens(turns=2)
    metas = [describe_image(s) for s in shots]
    images = ImageWriter(store)
    images.put(store, metas[0], shots[0], holder="seq/a/0")
    restarting = _RestartsBeforeImage(store, metas[1].store_key)
    with pytest.raises(ShardLostError, match="restarted while it was written"):
        images.put(restarting, metas[1], shots[1], holder="seq/a/1")
    assert store.contains([metas[1].store_key]) == [False]
    store.release([(metas[0].store_key, "seq/a/0")])
    assert store.stats().keys == 0
    store.destroy()
