"""Group-relative estimators against hand values, per-token broadcast, OPD signal, shaping checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.payloads import loss_mask, meta
from vlrl.control.advantages import (
    ShapingError,
    apply_shaping,
    group_advantages,
    opd_token_advantages,
    resolve_shaping,
    token_advantages,
)

S3 = math.sqrt(3)


@pytest.mark.parametrize(
    ("estimator", "rewards", "expected"),
    [
        # r = [1, 0, 0, 0]: m = 0.25, r - m = [0.75, -0.25, -0.25, -0.25],
        # s^2 = (0.5625 + 3 * 0.0625) / 4 = 0.1875, s = 0.4330127 -> 0.75 / s = sqrt(3), -0.25 / s = -1/sqrt(3)
        ("grpo", [1, 0, 0, 0], [S3, -1 / S3, -1 / S3, -1 / S3]),
        ("dr_grpo", [1, 0, 0, 0], [0.75, -0.25, -0.25, -0.25]),
        # leave-one-out: 1 - mean(0, 0, 0) = 1; 0 - mean(1, 0, 0) = -1/3; also 4/3 * (r - m)
        ("rloo", [1, 0, 0, 0], [1.0, -1 / 3, -1 / 3, -1 / 3]),
        # r = [2, 4, 9]: m = 5, r - m = [-3, -1, 4], s^2 = (9 + 1 + 16) / 3 = 26/3, s = 2.9439203
        ("grpo", [2, 4, 9], [-1.0190493, -0.3396831, 1.3587324]),
        ("dr_grpo", [2, 4, 9], [-3.0, -1.0, 4.0]),
        # 2 - (4 + 9)/2 = -4.5, 4 - (2 + 9)/2 = -1.5, 9 - (2 + 4)/2 = 6
        ("rloo", [2, 4, 9], [-4.5, -1.5, 6.0]),
    ],
)
def test_estimators_against_hand_values(estimator, rewards, expected):
    np.testing.assert_allclose(group_advantages(rewards, estimator), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
def test_group_of_one_has_zero_advantage(estimator):
    assert group_advantages([0.7], estimator).tolist() == [0.0]


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("value", [0.0, 1.0, 0.3])
def test_constant_rewards_are_exactly_zero(estimator, value):
    # 0.3 * 5 / 5 is not exactly 0.3 in floats: without the constant-group rule GRPO would give ~1e-10
    assert (group_advantages([value] * 5, estimator) == 0).all()


def test_bad_rewards():
    with pytest.raises(ValueError, match="non-empty 1-D"):
        group_advantages([], "grpo")
    with pytest.raises(ValueError, match="finite"):
        group_advantages([1.0, float("nan")], "grpo")
    with pytest.raises(ValueError, match="estimator 'ppo'"):
        group_advantages([1.0, 0.0], "ppo")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=16))
def test_grpo_advantages_have_zero_mean_and_unit_std(rewards):
    a = group_advantages(rewards, "grpo")
    assert abs(a.mean()) < 1e-6  # round-off in r - m, divided by s + eps >= eps
    if np.std(rewards) > 1e-3:  # s / (s + eps) >= 0.999: unit std up to eps
        assert a.std() == pytest.approx(1.0, abs=1e-3)
    elif min(rewards) == max(rewards):
        assert (a == 0).all()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=16))
def test_rloo_is_the_leave_one_out_baseline(rewards):
    r = np.array(rewards)
    direct = [r[i] - np.delete(r, i).mean() for i in range(r.size)]
    np.testing.assert_allclose(group_advantages(r, "rloo"), direct, atol=1e-9)


def test_token_advantages_broadcast_to_response_tokens():
    mask = loss_mask((2, 3, 1, 2))  # 00 111 0 11
    out = token_advantages(mask, 0.5)
    assert out.dtype == np.float32 and out.shape == (8,)
    assert out.tolist() == [0, 0, 0.5, 0.5, 0.5, 0, 0.5, 0.5]


def test_opd_token_advantages_are_teacher_minus_student_on_response():
    mask = loss_mask((1, 2, 1, 1))  # 0 11 0 1
    student = np.array([0, -1.0, -2.0, 0, -0.5], np.float32)
    teacher = np.array([-9, -0.5, -3.0, -9, -0.5], np.float32)
    out = opd_token_advantages(student, teacher, mask)
    assert out.dtype == np.float32 and out.tolist() == [0, 0.5, -1.0, 0, 0]
    with pytest.raises(ValueError, match=r"teacher_logprobs \(4,\)"):
        opd_token_advantages(student, teacher[:4], mask)


# -- shaping ------------------------------------------------------------------------------------


def scale_by_success(metas, advantages):
    return [a * (2.0 if m.success else 1.0) for m, a in zip(metas, advantages)]


def one_short(metas, advantages):
    return advantages[:-1]


def returns_nan(metas, advantages):
    advantages[0] = np.nan  # also checks the hook gets a copy
    return advantages


def raises(metas, advantages):
    raise KeyError("success_bonus")


def returns_text(metas, advantages):
    return ["high"] * len(advantages)


METAS = [meta("a", success=True), meta("b")]


def test_shaping_returns_float_array():
    out = apply_shaping(scale_by_success, METAS, np.array([0.5, -0.5]))
    assert out.dtype == np.float64 and out.tolist() == [1.0, -0.5]


@pytest.mark.parametrize(
    ("hook", "message"),
    [
        (one_short, r"one_short returned shape \(1,\); expected one advantage per sequence, shape \(2,\)"),
        (returns_nan, r"returns_nan returned non-finite advantages \[nan, -0.5\]"),
        (raises, r"raises raised KeyError: 'success_bonus'"),
        (returns_text, r"returns_text returned list; expected numbers"),
    ],
)
def test_shaping_output_is_validated_naming_the_hook(hook, message):
    advantages = np.array([0.5, -0.5])
    with pytest.raises(ShapingError, match=f"shaping hook tests.unit.control.test_advantages:{message}"):
        apply_shaping(hook, METAS, advantages)
    assert advantages.tolist() == [0.5, -0.5]


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("scale_by_success", "expected 'module:function'"),
        ("tests.unit.control.nowhere:f", "cannot load it: No module named 'tests.unit.control.nowhere'"),
        ("tests.unit.control.test_advantages:missing", "cannot load it: module .* has no attribute 'missing'"),
        ("tests.unit.control.test_advantages:S3", "is not callable"),
    ],
)
def test_resolve_shaping_errors(ref, message):
    with pytest.raises(ShapingError, match=message):
        resolve_shaping(ref)


def test_resolve_shaping():
    assert resolve_shaping("tests.unit.control.test_advantages:scale_by_success") is scale_by_success
