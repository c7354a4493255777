"""A trajectory's finish writes all of it or nothing: checks come before the first write, and a
write that fails takes back the earlier ones (sequence keys and image references)."""

from __future__ import annotations

import pytest

from tests.unit.rollout.test_trajectory import RULE, _image, _result
from vlrl.mm import image_refs
from vlrl.rollout.chat import Segment
from vlrl.rollout.trajectory import Trajectory
from vlrl.store import LocalStore, StoreTimeoutError


class FailingWrites(LocalStore):
    """Its write number ``fail_at`` (``put`` or ``put_shared``, from 1) raises, as a store shard
    that stops answering would."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at, self.writes = fail_at, 0

    def put(self, key, fields, **names):
        self._maybe_fail(key)
        super().put(key, fields, **names)

    def put_shared(self, key, fields, **names):
        self._maybe_fail(key)
        return super().put_shared(key, fields, **names)

    def _maybe_fail(self, key: str) -> None:
        self.writes += 1
        if self.writes == self.fail_at:
            raise StoreTimeoutError(f"write of {key!r} timed out")


def _two_sequences() -> Trajectory:
    trajectory = Trajectory("t")
    trajectory.set_context(Segment([1, 2, 3], [1]), [_image(1)])
    trajectory.add_generated(_result([9]))
    trajectory.set_context(Segment([1, 2, 9, 5, 6, 7], [4]), [_image(2)])  # rewritten: a second sequence
    trajectory.add_generated(_result([8]))
    return trajectory


def _finish(trajectory: Trajectory, store, reward: float = 1.0):
    return trajectory.finish(
        store, key="k", group_id="g", source="s", sample_index=0, reward=reward, success=True, finish="done",
        patch_rule=RULE,
    )


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4, 5, 6])  # writes: pack 1, image 1, k/0, pack 2, image 2, k/1
def test_a_failed_write_midway_leaves_no_key_and_no_image_reference(fail_at):
    store = FailingWrites(fail_at)
    with pytest.raises(StoreTimeoutError):
        _finish(_two_sequences(), store)
    assert store.stats().keys == 0


def test_a_failed_write_drops_only_this_trajectorys_reference_to_a_shared_image():
    store = FailingWrites(fail_at=0)
    first = _finish(_two_sequences(), store)  # holds one reference to each image
    store.fail_at = store.writes + 2  # the second trajectory's last sequence (its images are there: no writes)
    with pytest.raises(StoreTimeoutError):
        trajectory = _two_sequences()
        trajectory.trajectory_id = "u"
        trajectory.finish(
            store, key="u", group_id="g", source="s", sample_index=1, reward=1.0, success=True, finish="done",
            patch_rule=RULE,
        )
    assert store.stats().keys == 6  # the first trajectory's two sequences, two images and their tile packs
    refs = image_refs(first)
    assert store.release(refs) == [key for key, _ in refs]  # the first trajectory held their last references
    assert store.stats().keys == 2  # the packs went with the images that held them


def test_a_nan_reward_is_refused_before_anything_is_written():
    store = LocalStore()
    with pytest.raises(ValueError, match="SeqMeta.reward=nan"):
        _finish(_two_sequences(), store, reward=float("nan"))
    assert store.stats().keys == 0
