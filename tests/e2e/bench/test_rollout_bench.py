"""`vlrl bench rollout` where vLLM is not importable: the embedded engine's rollouts are measured and
the vLLM row says why it is missing (the side-by-side run is tests/vllm/test_bench_vllm.py)."""

from __future__ import annotations

import importlib.util

import pytest

from vlrl.bench import rollout_bench


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is importable: tests/vllm runs both")
def test_the_embedded_engine_is_measured_and_the_vllm_row_says_why_not(ray_session):
    result = rollout_bench.run("smoke", episodes=4, reps=1)
    row = result["embedded"]
    assert row["failed_episodes"] == 0 and row["store_keys_left"] == 0 and row["episodes_per_s"]["min"] > 0
    assert 0 < row["tokens_per_episode"] <= 40
    assert result["vllm"].startswith("skipped: vllm is not importable") and ".venv-vllm/bin/vlrl" in result["vllm"]
    assert result["vllm_over_embedded_tokens_per_s"] == result["vllm"]
