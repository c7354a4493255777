"""The overlong soft penalty at and around its boundaries."""

from __future__ import annotations

import pytest

from tests.helpers.payloads import sized
from vlrl.config import ConfigError, validate
from vlrl.control.penalties import OverlongPenalty


@pytest.mark.parametrize(
    ("length", "penalty"),
    [
        (0, 0.0),
        (6, 0.0),  # L = Lmax - B: last length without penalty
        (7, -0.125),  # (10 - 4 - 7) / 4 = -0.25, times factor 0.5
        (8, -0.25),  # (10 - 4 - 8) / 4 = -0.5
        (10, -0.5),  # L = Lmax: (10 - 4 - 10) / 4 = -1, the ramp meets the cap
        (11, -0.5),  # L > Lmax: -1
        (1000, -0.5),
    ],
)
def test_soft_penalty_at_the_boundaries(length, penalty):
    overlong = OverlongPenalty.Config(max_response_tokens=10, buffer_tokens=4, factor=0.5).build()
    assert overlong.penalty(length) == pytest.approx(penalty, abs=1e-12)


def test_zero_buffer_is_a_hard_step():
    overlong = OverlongPenalty.Config(max_response_tokens=10, buffer_tokens=0, factor=2.0).build()
    assert [overlong.penalty(n) for n in (9, 10, 11)] == [0.0, 0.0, -2.0]


def test_apply_adds_penalties_to_rewards():
    overlong = OverlongPenalty.Config(max_response_tokens=10, buffer_tokens=4, factor=1.0).build()
    metas = [sized("a", 5, reward=1.0), sized("b", 8, reward=1.0), sized("c", 12, reward=0.0)]
    assert overlong.apply(metas).tolist() == [1.0, 0.5, -1.0]


def test_buffer_longer_than_limit_is_a_config_error():
    with pytest.raises(ConfigError) as error:
        validate(OverlongPenalty.Config(max_response_tokens=10, buffer_tokens=11))
    assert error.value.path == "buffer_tokens" and "max_response_tokens=10" in str(error.value)
