"""examples/train_custom_encoder.py:small end to end: the recipe's own encoder class, shipped to the
engines and trainer ranks by value, trains through the warm start and the RL steps, and every
checkpoint keeps its weights in ``hf/encoder/``."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from encoders.protocol import WEIGHTS_FILE
from encoders.spec import ENCODER_DIR
from vlrl.config import load_recipe
from vlrl.job.metrics_log import read_metrics
from vlrl.mm import PatchRule

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_custom_encoder.py"


def test_the_small_recipe_trains_its_own_encoder_end_to_end(ray_session, tmp_path, capsys):
    # RL steps after the first, evaluations, baselines, checkpoints before the last, plots and
    # TensorBoard are the canonical run's to test
    lean = ("steps=1", "eval.every=0", "eval.chance=false", "eval.episodes=1", "checkpoint_every=0", "plots=false", "tensorboard=false")
    config = load_recipe(f"{RECIPE}:small", [f"run_dir={tmp_path}", *lean])
    summary = config.build().run()
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["steps"] == summary["steps"] == 1 and summary["store_keys_left"] == 0
    assert summary["groups"]["trained"] == 2 and summary["success_last"] is not None
    rl = [r for r in read_metrics(tmp_path) if r["phase"] == "rl"]
    assert [r["policy_version"] for r in rl] == [2] and all(r["train/encoded_images"] > 0 for r in rl)

    spec, tiny = config.trainer.encoder, config.tiny
    start = spec.resolve(PatchRule(min_pixels=tiny.min_pixels, max_pixels=tiny.max_pixels), 64).build().state_dict()
    last = load_file(tmp_path / "checkpoints" / "step-000001" / "hf" / ENCODER_DIR / WEIGHTS_FILE)
    assert set(last) == set(start)
    for name, value in start.items():
        assert not torch.equal(value, last[name]), name
