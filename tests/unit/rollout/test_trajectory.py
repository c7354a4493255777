"""A trajectory's split at finish: payload once into the store, metadata to the driver."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from vlrl.mm import PatchRule, delete_sequences
from vlrl.records import SeqMeta, image_store_key
from vlrl.rollout.chat import Segment
from vlrl.rollout.client import ContextImage
from vlrl.rollout.protocol import GenerateResult
from vlrl.rollout.trajectory import Trajectory
from vlrl.store import LocalStore, WriteLedger
from vlrl.store.sequence_rows import read_sequences

RULE = PatchRule(min_pixels=56 * 56, max_pixels=112 * 112)


def _image(value: int) -> ContextImage:
    return ContextImage.of(np.full((56, 84, 3), value, dtype=np.uint8))


def _result(ids, version=3, reason="stop") -> GenerateResult:
    return GenerateResult("r", np.array(ids, np.int32), np.full(len(ids), -0.5, np.float32), reason, version, 5, 0)


def test_finish_writes_payload_once_and_images_once_per_hash():
    store = LocalStore()
    screen_a, screen_b = _image(1), _image(2)
    trajectory = Trajectory("t")
    trajectory.set_context(Segment([1, 2, 3, 4], [1]), [screen_a])
    trajectory.add_generated(_result([9, 9]))
    trajectory.set_context(Segment([1, 2, 3, 4, 9, 9, 5, 6, 7], [1, 6]), [screen_a, screen_b])
    trajectory.add_generated(_result([8], version=4))
    # The same screen again.
    trajectory.set_context(Segment([1, 2, 3, 4, 9, 9, 5, 6, 7, 8, 5, 6, 7], [1, 6, 10]), [screen_a, screen_b, screen_a])
    trajectory.add_generated(_result([7]))
    (meta,) = trajectory.finish(
        store, key="seq/t", group_id="g", source="s", sample_index=0, reward=1.0, success=True,
        finish="done", patch_rule=RULE,
    )
    payload = store.get(["seq/t"])["seq/t"]
    assert payload["token_ids"].tolist() == [1, 2, 3, 4, 9, 9, 5, 6, 7, 8, 5, 6, 7, 7]
    assert payload["loss_mask"].tolist() == [False] * 4 + [True] * 2 + [False] * 3 + [True] + [False] * 3 + [True]
    np.testing.assert_allclose(payload["logprobs"][payload["loss_mask"]], -0.5)
    assert (payload["logprobs"][~payload["loss_mask"]] == 0).all()
    assert [m.content_hash for m in meta.images] == [screen_a.content_hash, screen_b.content_hash]
    assert meta.image_offsets == ((1, 0), (6, 1), (10, 0))
    assert meta.context_lengths == (4, 9, 13) and meta.policy_version == 3 and meta.turns == 3
    assert meta.num_tokens == 14 and meta.num_response_tokens == 4
    assert meta.images[0].num_tokens == RULE.num_tokens(84, 56)
    assert store.stats().keys == 5  # one sequence + two unique images, each with its pack of tiles
    assert store.contains([image_store_key(screen_a.content_hash)]) == [True]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"key": ""}, "SeqMeta.key=''"),
        ({"reward": float("nan")}, "SeqMeta.reward=nan"),
        ({"num_response_tokens": 11}, "num_response_tokens=11; expected 0..num_tokens=10"),
        ({"context_lengths": (0,)}, r"context_lengths=\(0,\)"),
        ({"image_offsets": ((3, 0),)}, r"image_offsets has \(3, 0\); expected offset < 10 and index < 0"),
    ],
)
def test_seqmeta_refuses_inconsistent_records(changes, message):
    fields = dict(
        key="k", group_id="g", source="s", sample_index=0, reward=0.0, success=False, finish="done", turns=1,
        num_tokens=10, num_response_tokens=2, context_lengths=(8,), policy_version=0,
    )
    with pytest.raises(ValueError, match=message):
        SeqMeta(**{**fields, **changes})


def test_engine_extras_pass_through_as_per_token_fields():
    store = LocalStore()
    trajectory = Trajectory("t")
    trajectory.set_context(Segment([1, 2, 3], [0]), [_image(5)])
    routed = np.array([[1, 4], [2, 3]], np.int16)
    first = GenerateResult("r", np.array([9, 9], np.int32), np.zeros(2, np.float32), "stop", 0, 3, 0, {"experts": routed})
    trajectory.add_generated(first)
    trajectory.set_context(Segment([1, 2, 3, 9, 9, 5, 6], [0, 5]), [_image(5), _image(6)])
    # the engine reused 4 cached tokens and computed the prompt from the first answer's last token on
    prompt_rows = np.array([[5, 5], [6, 6], [7, 7]], np.int16)
    second = GenerateResult(
        "r", np.array([8], np.int32), np.zeros(1, np.float32), "stop", 0, 3, 4, {"experts": routed[:1] + 10}, {"experts": prompt_rows}
    )
    trajectory.add_generated(second)
    (meta,) = trajectory.finish(
        store, key="k", group_id="g", source="s", sample_index=0, reward=0.0, success=False, finish="done", patch_rule=RULE
    )
    assert meta.extra_fields == ("extra/experts",)
    experts = store.get(["k"], ["extra/experts"])["k"]["extra/experts"]
    assert experts.dtype == np.int16 and experts.shape == (8, 2)
    assert experts.tolist() == [[0, 0]] * 3 + [[1, 4], [5, 5], [6, 6], [7, 7]] + [[11, 14]]


def test_extras_that_change_form_between_turns_are_refused():
    trajectory = Trajectory("t")
    trajectory.set_context(Segment([1], []), [])
    ok = GenerateResult("r", np.array([1], np.int32), np.zeros(1, np.float32), "stop", 0, 1, 0, {"x": np.zeros((1, 2), np.int16)})
    trajectory.add_generated(ok)
    bad = GenerateResult("r", np.array([1], np.int32), np.zeros(1, np.float32), "stop", 0, 1, 0, {"x": np.zeros((1, 3), np.int16)})
    with pytest.raises(ValueError, match=r"extra field 'x': rows of int16\[3\] after int16\[2\]"):
        trajectory.add_generated(bad)
    with pytest.raises(ValueError, match="extra field 'y' has 2 rows; expected 1, one a sampled token"):
        GenerateResult("r", np.array([1], np.int32), np.zeros(1, np.float32), "stop", 0, 1, 0, {"y": np.zeros(2)})
    with pytest.raises(ValueError, match="extra field 'y' has 2 rows; expected 3, one a prefilled prompt token"):
        GenerateResult("r", np.array([1], np.int32), np.zeros(1, np.float32), "stop", 0, 3, 0, {}, {"y": np.zeros(2)})


def test_a_rewritten_context_starts_a_new_sequence_whose_old_answers_carry_no_loss():
    store = LocalStore()
    a, b = _image(1), _image(2)
    trajectory = Trajectory("t")
    trajectory.set_context(Segment([1, 2, 3], [1]), [a])
    trajectory.add_generated(_result([9]), a.content_hash)
    # A window of one screenshot: the first screen's placeholder is gone from the new context.
    trajectory.set_context(Segment([1, 2, 9, 5, 6, 7], [4]), [b])
    trajectory.add_generated(_result([8]), "form:filled")
    first, second = trajectory.finish(
        store, key="k", group_id="g", source="s", sample_index=0, reward=1.0, success=True, finish="done",
        patch_rule=RULE, turn_rewards=(0.25, 0.75),
    )  # fmt: skip
    # each sequence carries its own requests' states and rewards
    assert (first.turn_states, first.turn_rewards) == ((a.content_hash,), (0.25,))
    assert (second.turn_states, second.turn_rewards) == (("form:filled",), (0.75,))
    assert (first.key, second.key) == ("k/0", "k/1")
    rows = store.get(["k/0", "k/1"])
    assert rows["k/0"]["token_ids"].tolist() == [1, 2, 3, 9] and rows["k/0"]["loss_mask"].tolist() == [0, 0, 0, 1]
    assert rows["k/1"]["token_ids"].tolist() == [1, 2, 9, 5, 6, 7, 8]
    assert rows["k/1"]["loss_mask"].tolist() == [0, 0, 0, 0, 0, 0, 1]  # the old answer is context now
    assert [m.content_hash for m in second.images] == [b.content_hash] and second.image_offsets == ((4, 0),)
    assert first.reward == second.reward == 1.0


def test_turn_rewards_not_one_per_request_are_refused_before_any_write():
    store = LocalStore()
    trajectory = Trajectory("t")
    trajectory.set_context(Segment([1, 2, 3], [1]), [_image(1)])
    trajectory.add_generated(_result([9]))
    with pytest.raises(ValueError, match="turn_rewards has 2 entries; the trajectory made 1 requests"):
        trajectory.finish(
            store, key="k", group_id="g", source="s", sample_index=0, reward=1.0, success=True, finish="done",
            patch_rule=RULE, turn_rewards=(0.5, 0.5),
        )  # fmt: skip
    assert store.stats().keys == 0


def _root_and_branch(prefix_from_root: bool):
    """A root of two turns and a branch from its turn 1 (its first turn's answer is prompt there,
    and it samples ``[8, 4]``, whose first token repeats the root's own turn-1 answer), finished
    into one store: the branch names its root's rows (``prefix_from_root``) or writes all of them."""
    store = LocalStore()
    screen_a, screen_b = _image(1), _image(2)
    root = Trajectory("root")
    root.set_context(Segment([1, 2, 3, 4], [1]), [screen_a])
    root.add_generated(_result([9, 9]))
    root.set_context(Segment([1, 2, 3, 4, 9, 9, 5, 6, 7], [1, 6]), [screen_a, screen_b])
    root.add_generated(_result([8]))
    labels = dict(group_id="g", source="s", reward=1.0, success=True, finish="done", patch_rule=RULE)
    (root_meta,) = root.finish(store, key="seq/root", sample_index=0, **labels)
    branch = Trajectory("branch")
    branch.set_context(Segment([1, 2, 3, 4, 9, 9, 5, 6, 7], [1, 6]), [screen_a, screen_b])
    branch.add_generated(_result([8, 4]))
    rows = (("seq/root", root.sequences[0].token_ids),) if prefix_from_root else ()
    (branch_meta,) = branch.finish(
        store, key="seq/branch", sample_index=1, branch_of=(0, 1), prefix_from=rows, **labels
    )  # fmt: skip
    return store, root_meta, branch_meta


def test_a_branch_stores_only_the_rows_after_its_roots_and_holds_the_roots_key():
    store, root, branch = _root_and_branch(prefix_from_root=True)
    copied_store, _, copied = _root_and_branch(prefix_from_root=False)
    assert (branch.prefix_key, branch.prefix_tokens) == ("seq/root", 9)  # its prompt: the 8 it sampled is its own
    assert store.get(["seq/branch"])["seq/branch"]["token_ids"].tolist() == [8, 4]
    whole = read_sequences(store, [branch], ["token_ids", "logprobs", "loss_mask"])["seq/branch"]
    as_copied = copied_store.get(["seq/branch"])["seq/branch"]
    for name, values in whole.items():
        np.testing.assert_array_equal(values, as_copied[name], err_msg=name)
    assert copied_store.stats().bytes_put - store.stats().bytes_put == 9 * (4 + 4 + 1)  # ids, logprobs, mask
    assert store.holds([("seq/root", "seq/branch")]) == [True]
    assert (branch.num_tokens, copied.num_tokens, copied.prefix_key) == (11, 11, "")


def test_a_roots_key_goes_with_the_last_of_its_branches():
    store, root, branch = _root_and_branch(prefix_from_root=True)
    root = replace(root, prefix_shared=True)  # as its tree returns it
    delete_sequences(store, [root])  # a replay buffer kept the branch: the root's rows stay for it
    assert store.contains(["seq/root"]) == [True]
    assert read_sequences(store, [branch], ["token_ids"])["seq/branch"]["token_ids"].tolist()[:3] == [1, 2, 3]
    delete_sequences(store, [branch])
    assert store.stats().keys == 0  # the root, the branch, their images and tile packs


def test_a_failed_branch_write_drops_its_reference_to_the_root():
    store, _, _ = _root_and_branch(prefix_from_root=True)
    branch = Trajectory("late")
    branch.set_context(Segment([1, 2, 3, 4, 9, 9], [1]), [_image(1)])
    branch.add_generated(_result([3]))
    ledger = WriteLedger("late branch")
    branch.finish(
        store, key="seq/late", group_id="g", source="s", sample_index=2, reward=0.0, success=False,
        finish="done", patch_rule=RULE, prefix_from=(("seq/root", [1, 2, 3, 4, 9, 9, 5]),), ledger=ledger,
    )  # fmt: skip
    assert store.holds([("seq/root", "seq/late")]) == [True]
    ledger.take_back()  # the tenant's result was thrown away
    assert store.holds([("seq/root", "seq/late")]) == [False] and store.contains(["seq/late"]) == [False]
    assert store.holds([("seq/root", "seq/branch")]) == [True]
