"""``vlrl bench async`` at smoke size: the synchronous run trains only tokens of the current
policy, the asynchronous one overlaps rollouts with training (tokens sampled by older versions
reach the trainer, and those past the bound are the ones cut). At smoke size the asynchronous
run's first weight push waits until its next batch is rolled out (``hold_first_push``), so stale
tokens are there on an idle machine as on a loaded one."""

from __future__ import annotations



def test_vlrl_bench_async_runs_both_modes_side_by_side(ray_session):
    from tests.helpers.run_bench import run_bench

    result = run_bench("async", size="smoke")
    long = result["configs"]["long"]
    sync, asynchronous = long["sync"], long["async"]
    # Synchronous: every trained token was sampled by the policy being trained, no episode
    # crossed a weight update.
    assert set(sync["staleness_tokens"]) == {"0"} and sync["spanning_sequences"] == 0
    # Asynchronous: the second batch was rolled out before the first push (held), so tokens of
    # an older version reached the trainer; those beyond the bound of two versions are exactly
    # the ones cut and counted.
    lags = {int(lag): tokens for lag, tokens in asynchronous["staleness_tokens"].items()}
    assert sum(tokens for lag, tokens in lags.items() if lag >= 1) > 0
    assert sum(tokens for lag, tokens in lags.items() if lag > 2) == asynchronous["stale_tokens_cut"]
    # The machine's busy CPU time over the RL steps: a share of what the cores could give.
    for run in (sync, asynchronous):
        assert 0 < run["cpu_utilization"] <= 1.05, run["cpu_utilization"]
