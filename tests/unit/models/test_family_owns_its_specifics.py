"""A model family owns what differs about it: registering another class under a family's name
changes what LoRA adapts by default, how pushes reach a vLLM replica, the tiny build's rates and
the layouts it trains under, with no other module told (``ModelFamily``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlrl.config import ConfigError
from vlrl.config.recipe import load_recipe
from vlrl.models import build_tiny, family, family_of, register
from vlrl.models.qwen2_vl import Qwen2VL
from vlrl.models.registry import BUILTINS
from vlrl.rollout.engine.vllm_lora import lora_push
from vlrl.train.lora import LoRA

TRAIN_CLICK = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"


class Narrow(Qwen2VL):
    """Qwen2-VL as a family that says other things of itself."""

    lora_llm_modules = ("q_proj", "v_proj")
    vllm_lora = False
    tiny_rate_scale = 0.25

    def check_layout(self, layout, model_path=None):
        super().check_layout(layout, model_path)
        if layout.cp > 1:
            raise ConfigError("cp", layout.cp, "1 for the narrow family")


@pytest.fixture
def narrow():
    register("qwen2_vl", Narrow, override=True)
    try:
        yield family("qwen2_vl")
    finally:
        register("qwen2_vl", BUILTINS["qwen2_vl"], override=True)


def test_lora_push_and_the_default_lora_layers_are_the_family_s(narrow, tmp_path):
    assert not lora_push("auto", 8, narrow)[0] and lora_push("auto", 8, Qwen2VL())[0]
    path = build_tiny("qwen2_vl", tmp_path / "tiny")
    assert isinstance(family_of(path), Narrow)
    targets = LoRA.Config(rank=2).build(family_of(path).load(path)).targets
    assert {name.rsplit(".", 1)[1] for name in targets} == {"q_proj", "v_proj"}


def test_the_run_plan_takes_the_family_s_rates_and_layout_limits(narrow, tmp_path):
    plan = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}"]).plan()
    assert plan.rate_scale == 0.25 and plan.rl.rank.optim.lr == pytest.approx(0.25e-3)
    with pytest.raises(ConfigError, match="1 for the narrow family") as error:
        load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}", "layout.cp=2"])
    assert error.value.path == "layout.cp"
