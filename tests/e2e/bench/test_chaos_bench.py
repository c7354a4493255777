"""``vlrl bench chaos``: faults injected into the main job's training loop end as counted
outcomes, with the books exact and no key left (five fault kinds here; the bench runs all)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("fault", ["env_host", "store_shard", "grader_hang", "harness_timeout", "hook_store_error"])
def test_a_fault_in_the_training_loop_is_survived_counted_and_leaves_no_key(ray_session, fault):
    from vlrl.bench import chaos_bench

    chaos_bench._register_chaos_desktop()
    outcome = chaos_bench._one(fault, steps=2, seed=1)
    assert outcome["injected"], outcome  # the fault really happened (an armed stall was run into)
    assert outcome["survived"] and outcome["books_exact"] and outcome["keys_left"] == 0, outcome
    if fault == "grader_hang":  # the hung judge call ended by its timeout, as a counted failure
        assert any("TimeoutError" in reason for reason in outcome["reasons"]), outcome
