"""vLLM as the benchmarks' anchor: ``vlrl bench delta``'s rows through vLLM's own OpenAI server, and
``vlrl bench rollout``'s embedded-engine vs vLLM rollouts, at smoke size (one server, one engine
of each kind)."""

from __future__ import annotations

import base64
import itertools
import sys

from vlrl.bench import rollout_bench
from vlrl.bench.delta_http import screenshots
from vlrl.bench.delta_vllm import headline, measure_vllm
from vlrl.mm import encode_image


def test_vllm_serve_receives_each_screenshot_once_under_delta_and_the_history_every_turn_under_full(monkeypatch):
    monkeypatch.setenv("VLRL_VLLM_PYTHON", sys.executable)  # this lane runs in the vLLM environment
    screen, turns = (640, 480), (2, 4)
    figures = measure_vllm(turns=turns, runs=2, screen=screen)
    assert "skipped" not in figures, figures
    png = [len(encode_image(shot)) for shot in screenshots(max(turns), screen)]
    for t in turns:
        row = figures[f"T{t}"]
        # Bytes counted by vLLM's own HTTP instrumentation, one request per turn, no cache miss.
        assert row["requests_full"] == row["requests_delta"] == t and row["cache_misses_delta"] == 0
        assert row["images_referenced_delta"] == t * (t - 1) // 2  # turn k names the k - 1 earlier screenshots
        assert row["png_bytes_once"] == sum(png[:t])
        # Delta's bodies hold every screenshot's PNG once, base64-encoded; full's hold turn k's k screenshots.
        assert row["wire_bytes_delta"] >= len(base64.b64encode(b"x" * sum(png[:t])))
        resent = sum(itertools.accumulate(png[:t])) - sum(png[:t])
        assert row["wire_bytes_full"] - row["wire_bytes_delta"] >= 4 / 3 * resent
        assert row["wire_full_over_delta"] > 1
        for scheme in ("full", "delta"):
            assert row[f"wall_s_{scheme}"]["runs"] == 2 and row[f"wall_s_{scheme}"]["min"] > 0
    assert figures["T4"]["wire_full_over_delta"] > figures["T2"]["wire_full_over_delta"]
    lead = headline(figures, turns)
    assert lead["vllm_wire_full_over_delta_T4"] == figures["T4"]["wire_full_over_delta"]
    assert lead["vllm_speedup_T4"] == figures["T4"]["rollout_speedup"] > 0


def test_the_main_jobs_rollouts_run_on_both_engines_side_by_side():
    result = rollout_bench.run("smoke", episodes=4, reps=2)
    for engine in ("embedded", "vllm"):
        row = result[engine]
        assert row["failed_episodes"] == 0 and row["store_keys_left"] == 0, row
        assert row["episodes_per_s"]["runs"] == 2 and row["episodes_per_s"]["min"] > 0
        assert 0 < row["tokens_per_episode"] <= 40  # one turn of at most 40 tokens
        assert row["tokens_per_s"]["median"] > 0
    for figure in ("episodes_per_s", "tokens_per_s"):
        ratio = result[f"vllm_over_embedded_{figure}"]
        assert isinstance(ratio, float) and ratio > 0
