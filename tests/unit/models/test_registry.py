"""Model families by name, and a checkpoint folder's family detected before anything starts."""

from __future__ import annotations

import json

import pytest

from vlrl.config import ConfigError, validate
from vlrl.models import ModelFamily, ModelFamilyError, family_of, register, registered
from vlrl.models.qwen2_vl import Qwen2VL
from vlrl.rollout.rollout_side import RolloutSide


def test_the_built_in_families():
    assert {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5"} <= set(registered())


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5"])
def test_a_folder_s_family_comes_from_its_config(tmp_path, model_type):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    assert family_of(tmp_path).name == model_type


def test_an_unsupported_checkpoint_names_its_model_type_and_the_supported_families(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}))
    with pytest.raises(ModelFamilyError, match=r"model_type='llava'.*LlavaForConditionalGeneration.*qwen2_5_vl \(model_type qwen2_5_vl\)"):
        family_of(tmp_path)
    with pytest.raises(ModelFamilyError, match="has no config.json"):
        family_of(tmp_path / "missing")


def test_the_job_config_refuses_an_unsupported_checkpoint_before_anything_starts(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava"}))
    with pytest.raises(ConfigError, match=r"'model_path'.*supported model family.*model_type='llava'"):
        validate(RolloutSide(model_path=str(tmp_path)))


def test_a_broken_family_is_refused_at_registration_with_the_rule():
    class Nameless(ModelFamily):
        name = "other"
        model_types = ("x",)
        model_class = Qwen2VL.model_class
        action_format = "qwen25vl"

        def tower_encoder(self, model, processor):
            return Qwen2VL().tower_encoder(model, processor)

        def tiny_config(self, *args):
            return Qwen2VL().tiny_config(*args)

    with pytest.raises(ModelFamilyError, match=r"model family 'mine': rule 'name'"):
        register("mine", Nameless)
    with pytest.raises(ModelFamilyError, match="already registered"):
        register("qwen2_vl", Nameless)
