"""Pass-rate sampling: the window, its edges, and the reasons it gives."""

from __future__ import annotations

import pytest

from tests.helpers.payloads import meta
from vlrl.config import ConfigError, validate
from vlrl.control.sampler import PassRateSampler
from vlrl.records import GroupError


def _group(passes: int, n: int = 4, **kw):
    return [meta(f"k{i}", success=i < passes, **kw) for i in range(n)]


@pytest.mark.parametrize(
    ("passes", "accepted", "reason"),
    [
        (0, False, "pass rate 0.00 at excluded min 0.00"),
        (1, True, "pass rate 0.25 in (0.00, 1.00)"),
        (3, True, "pass rate 0.75 in (0.00, 1.00)"),
        (4, False, "pass rate 1.00 at excluded max 1.00"),
    ],
)
def test_default_window_drops_all_failed_and_all_solved(passes, accepted, reason):
    decision = PassRateSampler.Config().build().decide(_group(passes))
    assert (decision.accepted, decision.pass_rate, decision.reason) == (accepted, passes / 4, reason)


@pytest.mark.parametrize("include_min", [False, True])
@pytest.mark.parametrize("include_max", [False, True])
def test_window_edges(include_min, include_max):
    sampler = PassRateSampler.Config(
        min_pass_rate=0.25, max_pass_rate=0.75, include_min=include_min, include_max=include_max
    ).build()
    decisions = [sampler.decide(_group(k)) for k in range(5)]  # pass rates 0, .25, .5, .75, 1
    assert [d.accepted for d in decisions] == [False, include_min, True, include_max, False]
    assert decisions[0].reason == "pass rate 0.00 below min 0.25"
    assert decisions[4].reason == "pass rate 1.00 above max 0.75"
    bracket = ("[" if include_min else "(") + "0.25, 0.75" + ("]" if include_max else ")")
    assert decisions[2].reason == f"pass rate 0.50 in {bracket}"
    if not include_max:
        assert decisions[3].reason == "pass rate 0.75 at excluded max 0.75"


def test_closed_window_keeps_everything():
    sampler = PassRateSampler.Config(include_min=True, include_max=True).build()
    assert all(sampler.decide(_group(k)).accepted for k in range(5))


def test_reason_shows_enough_digits():
    sampler = PassRateSampler.Config(max_pass_rate=0.99).build()
    assert sampler.decide(_group(4)).reason == "pass rate 1.00 above max 0.99"
    assert sampler.decide(_group(199, n=200)).reason == "pass rate 0.995 above max 0.99"


def test_pass_from_reward_is_strictly_above_threshold():
    sampler = PassRateSampler.Config(success_from="reward", reward_threshold=0.5).build()
    group = [meta(f"k{i}", reward=r, success=True) for i, r in enumerate([0.4, 0.5, 0.6, 1.0])]
    assert sampler.pass_rate(group) == 0.5  # 0.5 itself does not pass; the success flag is ignored


@pytest.mark.parametrize(
    ("kwargs", "path", "expected"),
    [
        ({"min_pass_rate": 0.8, "max_pass_rate": 0.2}, "max_pass_rate", "a number >= min_pass_rate=0.8"),
        ({"min_pass_rate": 0.5, "max_pass_rate": 0.5}, "max_pass_rate", "a number > min_pass_rate=0.5"),
        ({"max_pass_rate": 1.5}, "max_pass_rate", "a number >= 0 and <= 1"),
        ({"success_from": "judge"}, "success_from", "one of 'success', 'reward'"),
    ],
)
def test_config_errors_name_the_field(kwargs, path, expected):
    with pytest.raises(ConfigError) as error:
        validate(PassRateSampler.Config(**kwargs))
    assert (error.value.path, error.value.expected) == (path, expected)


def test_point_window_needs_both_ends_included():
    cfg = PassRateSampler.Config(min_pass_rate=0.5, max_pass_rate=0.5, include_min=True, include_max=True)
    assert [validate(cfg).build().decide(_group(k)).accepted for k in range(5)] == [False, False, True, False, False]


def test_not_one_group():
    with pytest.raises(GroupError, match=r"one group_id; these records have \['a', 'b'\]"):
        PassRateSampler.Config().build().decide([meta("k0", group="a"), meta("k1", group="b")])
    with pytest.raises(GroupError, match="at least one"):
        PassRateSampler.Config().build().decide([])
    with pytest.raises(GroupError, match=r"keys \['k0'\] appear more than once"):
        PassRateSampler.Config().build().decide([meta("k0"), meta("k0")])
