"""`vlrl bench scale --size smoke --json` end to end, in its own process: the bench starts a
two-node Ray cluster of its own (it cannot run on the session's Ray) and plays one RL step of
256 sequences through the real driver, store, pool, hook, planner and packers."""

from __future__ import annotations

from tests.helpers.run_bench import run_bench_alone
from vlrl.bench.scale_bench import STAGES

TOKEN_BYTES = 4 + 4 + 1 + 8
"""What every stored token costs at least: id, logprob, mask, routing record (4 layers, top-2)."""


def test_scale_bench_smoke_reports_every_stage_of_a_step_that_trained_every_sequence_and_left_no_key():
    result = run_bench_alone("scale", size="smoke")
    assert result["nodes"] == 2 and result["sizes"] == [256]
    (point,) = result["points"]
    n, steps = point["sequences"], point["steps"]
    # Every trajectory finished through the loop hosts' finish, and every group was trained once.
    assert point["sequences_per_step"] == point["finished_per_step"] == [n] * steps
    books = point["books"]
    assert books["generated"] == books["accepted"] == books["trained"] == point["groups"] * steps == n // 8 * steps
    assert point["books_drift"] == [] and point["keys_left"] == 0
    for stage in STAGES:
        figures = point["stages"][stage]
        assert figures["cpu_us_per_seq"]["min"] > 0 and figures["wall_us_per_seq"]["min"] > 0, stage
        assert figures["cpu_us_per_seq"]["runs"] == steps, stage
    # Bytes are counted where they move: the finish wrote every token's columns, the hook read the
    # loss mask and wrote advantages (5 bytes a token), the packers read 21 bytes a token (ids,
    # logprobs, mask, advantages, routing); a tenant and its outcome crossed Ray.
    tokens = point["tokens_per_seq"]
    assert point["stages"]["finish"]["bytes_per_seq"] >= tokens * TOKEN_BYTES
    assert point["stages"]["hook"]["bytes_per_seq"] >= tokens * 5
    assert point["stages"]["packing"]["bytes_per_seq"] >= tokens * (TOKEN_BYTES + 4)
    assert point["stages"]["launch"]["bytes_per_seq"] > 0 and point["launch_bytes_sampled"] > 0
    assert point["driver"]["cpu_s"]["min"] > 0 and point["driver"]["rss_mb"] > 0
    processes = point["processes"]
    assert len(processes["store_shards"]["rss_mb"]) == 2 and len(processes["raylets"]["rss_mb"]) == 2
    assert processes["store_shards"]["cpu_s"]["min"] > 0 and processes["loop_hosts"]["cpu_s"]["min"] > 0
    assert processes["gcs"]["fds"][0] > 0
    assert set(result["curves_cpu_us_per_seq"]) == set(STAGES)
