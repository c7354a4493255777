"""The accept-time hook on a LocalStore: decisions, column reads, per-token writes, OPD."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers.payloads import group, loss_mask, put_row, sized
from vlrl.config import ConfigError, validate
from vlrl.control.advantages import ShapingError
from vlrl.control.group_hook import GroupHook, MissingTeacherScores
from vlrl.control.penalties import OverlongPenalty
from vlrl.control.sampler import PassRateSampler
from vlrl.store import LocalStore

LAYOUTS = [(3, 2, 1, 2), (5, 1), (2, 4, 2, 3), (1, 6)]
"""Prompt/response token counts per sequence: 8, 6, 11 and 7 tokens."""

S3 = math.sqrt(3)


def double_success(metas, advantages):
    return advantages * np.where([m.success for m in metas], 2.0, 1.0)


def drop_last(metas, advantages):
    return advantages[:-1]


def _bytes_read(store):
    return store.io_stats().bytes_read


def test_accepted_group_gets_per_token_advantages_reading_only_the_mask():
    store = LocalStore()
    metas = group(store, [1.0, 0.0, 0.0, 0.0], layouts=LAYOUTS)
    before = _bytes_read(store)
    decision = GroupHook.Config().build()(metas, store)
    # only loss_mask was read: one byte per token of the group, 8 + 6 + 11 + 7
    assert _bytes_read(store) - before == sum(m.num_tokens for m in metas) == 32
    assert decision.status == "accepted" and decision.reason == "pass rate 0.25 in (0.00, 1.00)"
    assert decision.keys == ("g/0", "g/1", "g/2", "g/3") and decision.accepted
    np.testing.assert_allclose(decision.advantages, [S3, -1 / S3, -1 / S3, -1 / S3], rtol=1e-5)
    for m, layout, a in zip(metas, LAYOUTS, decision.advantages):
        written = store.get([m.key], fields=["advantages"])[m.key]["advantages"]
        assert written.dtype == np.float32 and written.shape == (m.num_tokens,)
        np.testing.assert_array_equal(written, np.where(loss_mask(layout), np.float32(a), np.float32(0)))


def test_written_values_spelled_out():
    store = LocalStore()
    metas = group(store, [1.0, 0.0], layouts=[(1, 2), (2, 1)])
    GroupHook.Config(estimator="dr_grpo").build()(metas, store)  # advantages [0.5, -0.5]
    rows = store.get([m.key for m in metas], fields=["advantages"])
    assert rows["g/0"]["advantages"].tolist() == [0, 0.5, 0.5]
    assert rows["g/1"]["advantages"].tolist() == [0, 0, -0.5]


def test_rejected_group_reads_nothing_and_keeps_its_keys():
    store = LocalStore()
    metas = group(store, [1.0, 1.0, 1.0])
    decision = GroupHook.Config().build()(metas, store)
    assert decision.status == "rejected" and decision.reason == "pass rate 1.00 at excluded max 1.00"
    assert not decision.accepted and decision.keys == ("g/0", "g/1", "g/2") and decision.advantages == ()
    assert _bytes_read(store) == 0
    assert store.contains(list(decision.keys)) == [True] * 3  # the driver deletes them, not the hook
    assert "advantages" not in store.schema("g/0")


def test_all_zero_advantages_are_dropped():
    store = LocalStore()
    metas = group(store, [1.0, 1.0, 1.0])
    everything = PassRateSampler.Config(include_min=True, include_max=True)
    decision = GroupHook.Config(sampler=everything).build()(metas, store)
    assert decision.status == "dropped"
    assert decision.reason == "pass rate 1.00 in [0.00, 1.00]; all advantages zero"
    assert decision.advantages == (0.0, 0.0, 0.0) and not decision.accepted
    assert _bytes_read(store) == 0 and "advantages" not in store.schema("g/0")


def test_zero_advantage_group_kept_when_asked():
    store = LocalStore()
    metas = group(store, [1.0, 1.0])
    everything = PassRateSampler.Config(include_min=True, include_max=True)
    decision = GroupHook.Config(sampler=everything, drop_zero_advantage=False).build()(metas, store)
    assert decision.accepted
    assert not store.get(["g/0"], fields=["advantages"])["g/0"]["advantages"].any()


def test_overlong_penalty_makes_an_all_solved_group_informative():
    store = LocalStore()
    layouts = [(1, 5), (1, 8), (1, 12)]  # response lengths 5, 8, 12
    metas = group(store, [1.0, 1.0, 1.0], layouts=layouts)
    cfg = GroupHook.Config(
        estimator="dr_grpo",
        sampler=PassRateSampler.Config(include_max=True),
        overlong=OverlongPenalty.Config(max_response_tokens=10, buffer_tokens=4, factor=1.0),
    )
    decision = cfg.build()(metas, store)
    # penalties 0, (10 - 4 - 8)/4 = -0.5, -1 -> rewards [1, 0.5, 0], mean 0.5 -> advantages [0.5, 0, -0.5]
    assert decision.advantages == (0.5, 0.0, -0.5)


def test_shaping_hook_from_config():
    store = LocalStore()
    metas = group(store, [1.0, 0.0], layouts=[(1, 1), (1, 1)])
    cfg = GroupHook.Config(estimator="dr_grpo", shaping="tests.unit.control.test_group_hook:double_success")
    decision = validate(cfg).build()(metas, store)
    assert decision.advantages == (1.0, -0.5)  # [0.5, -0.5] with the success doubled
    assert store.get(["g/0"], fields=["advantages"])["g/0"]["advantages"].tolist() == [0, 1.0]


def test_bad_shaping_output_names_the_hook_and_writes_nothing():
    store = LocalStore()
    metas = group(store, [1.0, 0.0])
    hook = GroupHook.Config(shaping="tests.unit.control.test_group_hook:drop_last").build()
    message = r"shaping hook tests.unit.control.test_group_hook:drop_last returned shape \(1,\)"
    with pytest.raises(ShapingError, match=message):
        hook(metas, store)
    assert "advantages" not in store.schema("g/0")


def test_bad_shaping_reference_is_a_config_error():
    with pytest.raises(ConfigError) as error:
        validate(GroupHook.Config(shaping="tests.unit.control.test_group_hook:nope"))
    assert error.value.path == "shaping" and "has no attribute 'nope'" in str(error.value)


def test_nested_config_errors_name_the_path():
    with pytest.raises(ConfigError) as error:
        validate(GroupHook.Config(overlong=OverlongPenalty.Config(max_response_tokens=4, buffer_tokens=8)))
    assert error.value.path == "overlong.buffer_tokens"


def test_mask_length_disagreeing_with_metadata_is_reported():
    store = LocalStore()
    m0, m1 = sized("g/0", 2, reward=1.0, success=True), sized("g/1", 2)
    put_row(store, m0, (1, 2))
    put_row(store, m1, (1, 3))  # one token more than m1 says
    with pytest.raises(ValueError, match=r"store key 'g/1': field 'loss_mask' has shape \(4,\)"):
        GroupHook.Config().build()([m0, m1], store)
    assert "advantages" not in store.schema("g/0")  # nothing of the group is written


# -- OPD ----------------------------------------------------------------------------------------


def _opd_group(store, shifts):
    """A group with teacher logprobs = student logprobs + shift on every token."""
    metas = group(store, [0.0] * len(shifts), layouts=LAYOUTS[: len(shifts)])
    for m, shift in zip(metas, shifts):
        student = store.get([m.key], fields=["logprobs"])[m.key]["logprobs"]
        store.add_fields(m.key, {"teacher_logprobs": student + np.float32(shift)})
    return metas


def test_opd_writes_teacher_minus_student_reading_three_columns():
    store = LocalStore()
    metas = _opd_group(store, [0.25, -0.5])
    before = _bytes_read(store)
    decision = GroupHook.Config(mode="opd").build()(metas, store)
    tokens = sum(m.num_tokens for m in metas)  # 8 + 6
    assert _bytes_read(store) - before == tokens * (4 + 4 + 1)  # logprobs, teacher_logprobs, loss_mask
    assert decision.status == "accepted" and decision.reason == "OPD: teacher-scored"
    assert decision.advantages == pytest.approx((0.25, -0.5), abs=1e-6)
    rows = store.get([m.key for m in metas], fields=["advantages", "loss_mask", "logprobs", "teacher_logprobs"])
    for m in metas:
        row = rows[m.key]
        expected = np.where(row["loss_mask"], row["teacher_logprobs"] - row["logprobs"], 0)
        np.testing.assert_array_equal(row["advantages"], expected.astype(np.float32))
        assert row["advantages"].dtype == np.float32


def test_opd_ignores_rewards_and_the_sampler():
    store = LocalStore()
    metas = _opd_group(store, [0.5, 0.5])  # all-failed rewards: the reward sampler would reject
    assert GroupHook.Config(mode="opd").build()(metas, store).accepted


def test_opd_without_teacher_scores_is_an_error():
    store = LocalStore()
    metas = _opd_group(store, [0.1])
    late = group(store, [0.0], layouts=[(1, 1)], group_id="late")
    with pytest.raises(MissingTeacherScores, match=r"keys \['late/0'\] have no 'teacher_logprobs' field"):
        GroupHook.Config(mode="opd").build()(late, store)
    assert GroupHook.Config(mode="opd").build()(metas, store).accepted


def test_opd_teacher_agreeing_everywhere_is_dropped():
    store = LocalStore()
    metas = _opd_group(store, [0.0, 0.0])
    decision = GroupHook.Config(mode="opd").build()(metas, store)
    assert decision.status == "dropped" and not decision.accepted
    assert "advantages" not in store.schema("g/0")
