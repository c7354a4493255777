"""The run folder a user reads: metrics.jsonl (+ TensorBoard) and the plots (the progress line: test_progress.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from vlrl.job.metrics_log import MetricsLog, read_metrics
from vlrl.job.plots import plot_run


def _fake_run(run_dir, steps: int = 6) -> None:
    log = MetricsLog(run_dir, tensorboard=False)
    log.log(0, "eval", {"tag": "chance", "eval/chance": 0.05})
    log.log(0, "eval", {"tag": "base", "eval/success": 0.0})
    for step in range(1, 4):
        log.log(step, "warm-start", {"train/loss": 1.0 / step})
    log.log(0, "eval", {"tag": "warm", "eval/success": 0.3})
    for step in range(1, steps + 1):
        log.log(step, "rl", {
            "rollout/reward": step / steps, "rollout/pass_rate": step / steps, "rollout/turns": 1.0,
            "rollout/response_tokens": 30.0, "rollout/tokens_per_s": 100.0, "rollout/a/reward": 0.1,
            "rollout/b/reward": 0.2, "train/entropy": 1.0 - step / 10, "train/tokens_per_s": 1e4,
            "time/step_s": 3.0, "train/loss": float("nan"),
        })  # fmt: skip
        if step % 3 == 0:
            log.log(step, "eval", {"tag": f"step{step}", "eval/success": 0.3 + step / 20, "eval/a/success": 0.5})
    log.log(steps, "summary", {"success_first": 0.0, "success_last": 0.6, "steps": steps, "wall_s": 12.5})
    log.close()
    episodes = run_dir / "episodes"
    episodes.mkdir()
    for tag in ("base", "warm", "final"):
        Image.fromarray(np.full((40, 60, 3), 200, np.uint8)).save(episodes / f"{tag}-eval_1.png")


def test_records_read_back_in_order_with_non_finite_numbers_as_null(tmp_path):
    _fake_run(tmp_path)
    records = read_metrics(tmp_path)
    assert [r["phase"] for r in records[:3]] == ["eval", "eval", "warm-start"]
    rl = [r for r in records if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2, 3, 4, 5, 6]
    assert rl[0]["train/loss"] is None
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 7, "pha')  # a run killed mid-write
    assert len(read_metrics(tmp_path)) == len(records)


def test_a_resumed_log_appends_and_continues_the_clock(tmp_path):
    _fake_run(tmp_path)
    before = read_metrics(tmp_path)
    log = MetricsLog(tmp_path, tensorboard=False)
    log.log(7, "rl", {"rollout/reward": 1.0})
    log.close()
    after = read_metrics(tmp_path)
    assert after[: len(before)] == before
    assert after[-1]["time_s"] >= before[-1]["time_s"]


def test_tensorboard_events_mirror_the_numbers(tmp_path):
    pytest.importorskip("tensorboard")
    log = MetricsLog(tmp_path, tensorboard=True)
    assert log.tensorboard
    log.log(1, "rl", {"train/loss": 0.5, "tag": "x", "train/nan": float("nan")})
    log.close()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_plot_run_writes_every_plot_and_the_episode_sheet(tmp_path):
    _fake_run(tmp_path)
    written = plot_run(tmp_path)
    names = sorted(p.name for p in written)
    assert names == sorted([
        "reward.png", "pass_rate.png", "episode_length.png", "entropy.png", "throughput.png", "overview.png", "episodes.png",
    ])  # fmt: skip
    for path in written:
        with Image.open(path) as image:
            assert image.width > 100 and image.height > 100


def test_plot_run_of_a_folder_without_metrics_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plot_run(tmp_path)


def test_summary_is_json_serialisable(tmp_path):
    _fake_run(tmp_path)
    json.dumps(read_metrics(tmp_path))


def test_a_rewind_moves_the_records_after_the_checkpoint_out_of_the_log(tmp_path):
    _fake_run(tmp_path)  # RL steps 1-6, evaluations at 3 and 6
    log = MetricsLog(tmp_path, tensorboard=False)
    assert log.rewind(4) == 3  # RL steps 5, 6 and the evaluation at 6
    log.log(5, "rl", {"rollout/reward": 2.0})
    log.close()
    kept = read_metrics(tmp_path)
    assert [r["step"] for r in kept if r["phase"] == "rl"] == [1, 2, 3, 4, 5]
    assert kept[-1]["rollout/reward"] == 2.0
    assert [r["tag"] for r in kept if r["phase"] == "eval"] == ["chance", "base", "warm", "step3"]
    assert [r["phase"] for r in kept].count("warm-start") == 3 and kept[-2]["phase"] == "summary"
    moved = [json.loads(line) for line in (tmp_path / "metrics.reverted.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["step"]) for r in moved] == [("rl", 5), ("rl", 6), ("eval", 6)]
