"""``vlrl train examples/train_click.py:small`` on another model family, from a Qwen3-VL checkpoint
folder that transformers' own classes wrote (``model_path``). Qwen2-VL is the canonical run's
family (tests/e2e/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.hf_checkpoints import build_hf_checkpoint
from vlrl.cli import main
from vlrl.config import load_recipe

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"
STEPS = load_recipe(f"{RECIPE}:small", []).steps
LEAN = ("plots=false", "eval.every=0", "eval.chance=false", "checkpoint_every=0")
"""What the canonical run already covers: plots, evaluations between steps, baselines, checkpoints."""


def _train(capsys, run_dir: Path, *overrides: str) -> dict:
    """``vlrl train RECIPE:small`` with ``overrides``; its JSON summary (the last line of stdout)."""
    argv = ["train", f"{RECIPE}:small", "--set", f"run_dir={run_dir}"]
    for override in (*LEAN, *overrides):
        argv += ["--set", override]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_the_small_recipe_trains_a_transformers_built_qwen3_vl_checkpoint(ray_session, tmp_path, capsys):
    """One run covers a family beside the canonical run's and a folder transformers' own classes
    wrote (``model_path``). That ``tiny.family`` builds the family the job trains, for every family,
    is tests/unit/models/test_tiny.py; Qwen2.5-VL's transformers-built folder is served in
    tests/integration/rollout/server/test_serve_families.py and stepped in
    tests/integration/train/test_families_end_to_end.py."""
    path = build_hf_checkpoint("qwen3_vl", tmp_path / "checkpoint")
    summary = _train(capsys, tmp_path / "run", f"model_path={path}")
    assert summary["model"] == str(path) and summary["model_family"] == "qwen3_vl"
    assert summary["steps"] == STEPS and summary["store_keys_left"] == 0
