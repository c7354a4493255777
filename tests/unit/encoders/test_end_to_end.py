"""An encoder used end to end must give the processor's patch-rule token count in the LLM's width:
anything else is refused on the driver, before any actor starts, naming the encoder, what is wrong
and the probe image; the engine's and trainer's encoders must agree; every build starts alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from encoders.protocol import EncoderError
from encoders.spec import ENCODER_DIR, EncoderSpec
from vlrl.config import ConfigError, load_recipe, validate
from vlrl.mm import patch_rule_of
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.train.trainer import Trainer

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_custom_encoder.py"


@pytest.fixture(scope="module")
def spec() -> EncoderSpec:
    """The example's spec (loading the recipe registers its encoder)."""
    return load_recipe(f"{RECIPE}:small").engine.encoder


@pytest.fixture(scope="module")
def rule(processor):
    return patch_rule_of(processor)


def test_a_fixed_token_count_is_refused_before_any_engine_starts(tiny_path):
    fixed = EncoderSpec(name="torchvision", fields=dict(stages=1, image_size=32, hidden_size=64))
    config = validate(EmbeddedEngine.Config(encoder=fixed))
    expected = (
        r"encoder 'torchvision': num_tokens\(meta\) is 64 on a 40x30 probe image; the processor's patch rule"
        r" gives 6 \(2x3 merged 28x28 patches of the 84x56 resized image\)"
    )
    with pytest.raises(EncoderError, match=expected):
        config.build(model_path=str(tiny_path))


def test_other_resize_bounds_are_refused_for_the_trainer_too(tiny_path, spec):
    wrong = EncoderSpec(name=spec.name, fields={**spec.fields, "max_pixels": 112 * 112})
    with pytest.raises(EncoderError, match=r"encoder 'conv-patch': num_tokens\(meta\) is 12 on a 320x240 probe.* gives 54"):
        Trainer.Config(encoder=wrong).resolved_encoder(str(tiny_path))


def test_rows_of_another_width_are_refused(spec, rule):
    narrow = EncoderSpec(name=spec.name, fields={**spec.fields, "hidden_size": 32})
    with pytest.raises(EncoderError, match="encoder 'conv-patch': hidden_size is 32; the LLM's embeddings have 64"):
        narrow.resolve(rule, 64)


def test_the_engine_and_the_trainer_must_use_the_same_encoder():
    with pytest.raises(ConfigError, match=r"config field 'engine.encoder'.*expected the trainer's encoder"):
        load_recipe(f"{RECIPE}:small", ["trainer.encoder.seed=1"])


def test_builds_start_alike_and_a_policy_folder_s_own_weights_win(spec, rule, tmp_path):
    resolved = spec.resolve(rule, 64)
    first, second = resolved.build(), resolved.build(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    with torch.no_grad():
        for p in first.parameters():
            p.add_(1.0)
    first.save_pretrained(tmp_path / ENCODER_DIR)
    own = resolved.build(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), own.state_dict().values()))
