"""``vlrl bench chaos``: faults injected into the main job's training loop end as counted
outcomes, with the books exact and no key left (five fault kinds here; the bench runs all).

The five runs share one session, one after the other, as the bench runs them (each with a driver
of its own): one session start instead of five, and each fault meets the session the faults
before it left (a replaced env host, a restarted shard, a stalled harness thread)."""

from __future__ import annotations

import pytest

FAULTS = ("env_host", "store_shard", "grader_hang", "harness_timeout", "hook_store_error")


@pytest.fixture(scope="module")
def outcomes(ray_session) -> dict:
    from vlrl.bench import chaos_bench

    return chaos_bench.run_faults(FAULTS, steps=2, seed=1)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_in_the_training_loop_is_survived_counted_and_leaves_no_key(outcomes, fault):
    outcome = outcomes[fault]
    assert outcome["injected"], outcome  # the fault really happened (an armed stall was run into)
    assert outcome["survived"] and outcome["books_exact"] and outcome["keys_left"] == 0, outcome
    if fault == "grader_hang":  # the hung judge call ended by its timeout, as a counted failure
        assert any("TimeoutError" in reason for reason in outcome["reasons"]), outcome

